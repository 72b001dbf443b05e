"""kernelgen's version: the CLI's --version, the page's facts, and the key of the kernels the
browser keeps across page loads (stored.py), so a new version never reuses an old one's code."""

__version__ = "0.1.0"
