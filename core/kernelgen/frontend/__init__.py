"""Front ends and Tensor method groups: everything that builds lazy graphs for the pipeline.

tensor.py (Tensor) lists the operation mixins among its bases (tensor_ops, tensor_nn, scan, sort,
indexing_ops, shape_ops, model_ops, protocols, autograd); einsum.py, combine.py (where, cat,
stack) are functions; nn.py, optim.py and safetensors.py are kg.nn, kg.optim and kg.save/load.
"""
