"""The backends: one package per target language (wgsl/, ptx/), each with the same file roles
(target.py: the Target and its facts; legalize.py: graph rules and typed errors; expressions.py /
instructions.py: one value or instruction; writer.py: one kernel), and the Target of each
(target.py, targets.py)."""
