"""The lazy tensor graph and its schedule: lazy.py (LazyOp, the node a Tensor holds until it is
realized, and Buffer), view.py (View: shape, strides, offset and mask; movement ops as index math)
schedule.py (the graph cut into kernels, ScheduleItems in launch order) and join.py (sibling
elementwise kernels joined into one kernel with several outputs). Below it: the UOp IR
(uop/); above it: the lowering of each kernel (lowering/)."""
