"""kg.nn and kg.optim: trainable models. module.py (Module, Parameter, the seed counter),
layers.py (Linear, Conv2d, LayerNorm, BatchNorm2d, Embedding, Dropout, Sequential, activations,
losses), optim.py (SGD, Adam, AdamW: kg.optim) and safetensors.py (kg.save / kg.load).

`kg.nn` is this package: every public name of layers.py and module.py is here.
"""
from .module import (PENDING, Module, Parameter, StateDictError, manual_seed,  # noqa: F401
                     take_pending)
from .layers import *  # noqa: F401,F403 (the layers are kg.nn's names)
