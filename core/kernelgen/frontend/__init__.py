"""The front end: Tensor operations built from the lazy primitives, as mixin classes of `Tensor`."""
