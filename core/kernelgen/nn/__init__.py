"""kg.nn and kg.optim: trainable models. module.py (Module, Parameter, the seed counter),
layers.py (Linear, Conv2d, LayerNorm, BatchNorm2d, Embedding, Dropout, Sequential, activations,
losses), decode.py (KVCache and kv_append: a KV cache written in place; sample_token), optim.py
(SGD, Adam, AdamW: kg.optim) and safetensors.py (kg.save / kg.load).

`kg.nn` is this package: every public name of layers.py, module.py and decode.py is here.
"""
from .module import (PENDING, Module, Parameter, StateDictError, manual_seed,  # noqa: F401
                     take_pending)
from .layers import *  # noqa: F401,F403 (the layers are kg.nn's names)
from .decode import KVCache, kv_append, sample_token  # noqa: F401

__all__ = ["Module", "Parameter", "StateDictError", "manual_seed",
           "Linear", "Conv1d", "Conv2d", "Embedding", "LayerNorm", "BatchNorm2d", "GroupNorm",
           "RMSNorm", "Dropout", "Sequential", "ModuleList", "Identity", "Flatten",
           "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "LeakyReLU", "ELU", "Softplus", "Hardswish",
           "Mish", "Softmax", "LogSoftmax", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
           "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
           "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "KVCache", "kv_append", "sample_token"]
