"""Front ends: ways into the lazy Tensor graph besides writing Tensor code (the ONNX importer)."""
