"""The front ends: Tensor operations and the APIs built on them."""
