"""Front ends and Tensor method groups: everything that builds lazy graphs for the pipeline."""
