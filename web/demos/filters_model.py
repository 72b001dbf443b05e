"""The filters demo's stages as kernelgen programs with named inputs, one bundle each, exported at
build time for the sample image's size (build.sh: python web/demos/filters_model.py OUT_DIR), so
the page filters the sample without Python: OUT_DIR/<stage>/model.js takes `img` (H, W, 3) floats
0..1 (plus the stage's parameters: brightness, contrast, saturation (1,) or weights (3, 3)) and
returns the filtered `img`, unclipped; the page chains the stages and clips. The same formulas as
the PRELUDE of filters.js (the program the page runs through Pyodide for other images).
"""
import os
import struct
import sys

import kernelgen as kg

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ("colour", "sepia", "blur", "conv", "sobel", "invert")


def sample_size():
  """(height, width) of sample.png, from its IHDR chunk."""
  with open(os.path.join(HERE, "sample.png"), "rb") as f:
    width, height = struct.unpack(">II", f.read(24)[16:24])
  return height, width


H, W = sample_size()


def const(values):
  return kg.Tensor(values, dtype="float32", device="PYTHON")


def edge_pad(x, n):
  """x (C, 1, H, W) with its edge rows and columns repeated n times on each side."""
  return x.pad(((0, 0), (0, 0), (n, n), (n, n)), mode="edge")


def conv(img, k):
  """Each channel of img (H, W, C) correlated with the square Tensor k (edges repeated)."""
  n = k.shape[0]
  x = edge_pad(img.permute(2, 0, 1).unsqueeze(1), n // 2)
  return x.conv2d(k.reshape(1, 1, n, n)).squeeze(1).permute(1, 2, 0)


def luma(img):
  return (img * const([0.299, 0.587, 0.114])).sum(axis=-1, keepdim=True)


def stage(name):
  """{"img": the stage's output} for its named inputs."""
  img = kg.Tensor.empty(H, W, 3, name="img", device="PYTHON")
  if name == "colour":
    b, c, s = (kg.Tensor.empty(1, name=n, device="PYTHON")
               for n in ("brightness", "contrast", "saturation"))
    img = (img - 0.5) * c + 0.5 + b
    gray = luma(img)
    return {"img": gray + (img - gray) * s}
  if name == "sepia":
    return {"img": img @ const([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168],
                                [0.272, 0.534, 0.131]]).T}
  if name == "blur":
    g = [1, 4, 6, 4, 1]
    return {"img": conv(img, const([[a * b / 256 for b in g] for a in g]))}
  if name == "conv":
    return {"img": conv(img, kg.Tensor.empty(3, 3, name="weights", device="PYTHON"))}
  if name == "sobel":
    gray = luma(img)
    gx = conv(gray, const([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]))
    gy = conv(gray, const([[-1, -2, -1], [0, 0, 0], [1, 2, 1]]))
    return {"img": ((gx * gx + gy * gy).sqrt() / 4).expand(H, W, 3)}
  return {"img": 1 - img}


if __name__ == "__main__":
  for name in STAGES:
    kg.export(stage(name), os.path.join(sys.argv[1], name), format="webgpu")
