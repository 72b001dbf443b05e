"""Front ends built on Tensor: autograd, nn layers, optimizers, safetensors."""
