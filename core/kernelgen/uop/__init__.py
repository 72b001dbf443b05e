"""The kernel IR (IR.md): ops.py (Ops and the interned UOp node), pattern.py (UPat,
PatternMatcher, graph_rewrite), verify.py (the IR's invariants), linearize.py (a kernel graph to
an ordered UOp list), program.py (Kernel, CompiledKernel, Launch: what a target's render hands to
a runtime), alu.py (every ALU op's exact scalar semantics), interpret.py (the reference
interpreter, device PYTHON) and wmma.py (the tensor-core fragment layouts)."""
