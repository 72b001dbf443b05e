"""Draw the image filters demo's sample picture (a sunset over hills and a lake) procedurally
and write it as a PNG: web/demos/sample.png, 160x120 RGB. numpy + the standard library."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

WIDTH, HEIGHT = 160, 120
OUT = Path(__file__).resolve().parent.parent / "web" / "demos" / "sample.png"


def mix(a, b, t):
  """Colours a, b (RGB 0..1) blended by t (broadcast over pixels)."""
  t = np.asarray(t)[..., None]
  return np.asarray(a) * (1 - t) + np.asarray(b) * t


def scene() -> np.ndarray:
  """HEIGHT x WIDTH x 3 floats in 0..1."""
  y, x = np.mgrid[0:HEIGHT, 0:WIDTH] / np.array([HEIGHT, WIDTH])[:, None, None]
  horizon = 0.62
  img = mix([0.10, 0.12, 0.35], [0.98, 0.55, 0.25], np.clip(y / horizon, 0, 1) ** 1.4)
  sun = np.hypot((x - 0.68) * WIDTH / HEIGHT, y - 0.48)
  img = mix(img, [1.0, 0.92, 0.55], np.clip((0.11 - sun) * 40, 0, 1))
  img = img + 0.25 * np.exp(-sun * 6)[..., None] * np.array([1.0, 0.6, 0.3])
  far = horizon - 0.10 - 0.06 * np.sin(x * 9 + 1) - 0.03 * np.sin(x * 23)
  img = mix(img, [0.35, 0.20, 0.35], y > far)
  near = horizon - 0.02 - 0.10 * np.exp(-((x - 0.2) / 0.18) ** 2) - 0.02 * np.sin(x * 40)
  img = mix(img, [0.12, 0.10, 0.18], y > near)
  water = y > horizon
  mirror = np.clip(2 * horizon - y, 0, 1)
  ripple = 0.5 + 0.5 * np.sin(y * 260 + np.sin(x * 30) * 2)
  reflected = mix([0.10, 0.12, 0.35], [0.98, 0.55, 0.25], np.clip(mirror / horizon, 0, 1) ** 1.4)
  reflected = mix(reflected, [1.0, 0.85, 0.5], np.clip((0.05 - np.abs(x - 0.68)) * 30, 0, 1)
                  * ripple)
  img = np.where(water[..., None], reflected * (0.55 + 0.1 * ripple[..., None]), img)
  return np.clip(img, 0, 1)


def png(rgb: np.ndarray) -> bytes:
  """An 8-bit RGB PNG (no filtering, no colour-space chunks) of rgb (H x W x 3 uint8)."""
  def chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
  height, width, _ = rgb.shape
  rows = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))
  header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
  return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9))
          + chunk(b"IEND", b""))


def main() -> None:
  OUT.write_bytes(png((scene() * 255 + 0.5).astype(np.uint8)))
  print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
  main()
