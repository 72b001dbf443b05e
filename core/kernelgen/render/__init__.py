"""The backends: target.py (the Target: a backend's facts, options and steps), targets.py (the
registry, TARGETS and get_target) and one package per target language (wgsl/, ptx/), each with
the same file roles (target.py: its Target and facts; legalize.py: graph rules and typed errors;
expressions.py / instructions.py: one value or instruction; writer.py: one kernel; __init__.py:
`legalize` and `render`). Adding a backend: one such folder and its line in targets.TARGETS."""
