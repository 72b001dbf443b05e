"""Export: compiled programs written out for use without kernelgen (filled in by the export issue)."""
