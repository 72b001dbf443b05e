"""The device runtimes (device.py opens them by name): base.py (the Runtime interface),
python.py (PYTHON: the reference interpreter), webgpu_native.py and webgpu_browser.py (WEBGPU in
CPython through wgpu, and in the page), cuda.py (CUDA, through the driver API) and ptxsim.py
(PTXSIM: the PTX simulator)."""
