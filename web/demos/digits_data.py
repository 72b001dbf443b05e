"""The training data of the digits demo's "Train in the page", written at site-assembly time:

    python web/demos/digits_data.py site/web/demos/digits_data.json

scikit-learn's 8x8 digits (they ship inside scikit-learn: no download) split exactly as
examples/train_digits.py splits them (stratified 80/20, seed 0), as JSON: pixels 0..16 and labels
as base64 uint8, so the page trains on data from its own origin.
"""
import base64
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"


def load_split():
  spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.load_split()


def b64(array) -> str:
  return base64.b64encode(np.asarray(array, np.uint8).tobytes()).decode("ascii")


def main(out: Path) -> None:
  x_train, y_train, x_test, y_test = load_split()
  data = {"format": "kernelgen-digits-data/1",
          "about": "sklearn load_digits, stratified 80/20 split (seed 0) as in "
                   "examples/train_digits.py; x: n x 64 pixels 0..16, y: labels; base64 uint8",
          "n_train": len(y_train), "n_test": len(y_test),
          "x_train": b64(x_train), "y_train": b64(y_train),
          "x_test": b64(x_test), "y_test": b64(y_test)}
  out.write_text(json.dumps(data) + "\n")


if __name__ == "__main__":
  main(Path(sys.argv[1]))
