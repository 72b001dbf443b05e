"""Export: a compiled program as a standalone bundle, and running a bundle from Python.

    kg.export(outputs, "DIR", format="webgpu")    # DIR/model.js, *.wgsl, weights, manifest.json
    kg.export(outputs, "DIR", format="ptx", arch="sm_80")
    kg.load_bundle("DIR").run({"x": x}, device="PTXSIM")   # {name: Tensor}

plan.py describes the program (buffers, kernels, shared memory), bundle.py writes and runs it,
loader.js and its parts (loader_*.js) are the browser side (scripts.py joins them into
DIR/model.js; generate.js beside it holds a causal LM's generate()); the weights file is written
and read by nn/safetensors.py (the raw level of kg.save / kg.load).
"""
from .bundle import Bundle, export, load_bundle

__all__ = ["Bundle", "export", "load_bundle"]
