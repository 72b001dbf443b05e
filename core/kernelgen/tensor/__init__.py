"""The Tensor front end: everything that builds lazy graphs for the pipeline.

tensor.py (the Tensor class, which lists the operation families of ops/ among its bases),
data.py (host data: nesting, dtype inference, narrowing), operands.py (the mixins' root,
operand coercion and result dtypes), names.py (input names), protocols.py (Python and numpy
protocols), combine.py (where, cat, stack), autograd.py (backward, no_grad) and jit.py (kg.jit).
ops/ holds one operation family per module. kg.nn, kg.optim and kg.onnx are front ends of their
own beside this one (nn/, onnx/).
"""
