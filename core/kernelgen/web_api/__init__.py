"""What the web page's worker (web/worker.js) calls: compile or run a program given as text.

A program is Python that assigns its result tensor to `out` (the CLI's convention); it runs with
`kg`, `kernelgen`, `Tensor`, `dtypes`, `where`, `cat` and `stack` already imported. Every entry
point returns plain data (dicts, lists, str, int, float, bytes) and never raises: a failure is
`{"ok": False, "error": {"type", "message", "line", ...}}` where `line` is the program's line.

The package: program.py (a program's compile, run, compare and errors), models.py (the Models
view: ONNX models and generation); this file re-exports the names the worker calls. Standard
library only; the browser runtime (runtime/webgpu_browser.py) is the one module that touches `js`.
"""
from __future__ import annotations

from .program import (self_test, PROGRAM, TOLERANCES, FORMATS, setup, execute, ProgramError,
                      program_line, MISSING_MODULE, error_data, program_traceback, guarded,
                      kernel_data, kernel_dims, compile_target, compile_program, export_bundles,
                      tensor_data, logical_shape, values, compare, load_stored, take_stored,
                      run_program, check_reference, release, warm, WARM_MODULES, verify_ptx)
from .models import (random_inputs, given_inputs, LABEL_KEYS, MAX_LABELS, image_input,
                     model_labels, top_k, load_model, unload_model, run_model, generate_model,
                     compare_model)
