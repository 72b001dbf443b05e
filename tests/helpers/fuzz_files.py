"""The file fuzzer (issue 41): seeded bit flips and truncations of valid files kernelgen opens
from strangers (a bundle's manifest.json, its kernel file and weights.safetensors, a
safetensors file, an ONNX model), each loaded and run as a user would; every outcome must be a
result or a KernelgenError, within a time limit per case (hostile_report.CASE_SECONDS) in a
process whose address space is capped (hostile_report.MEMORY_BYTES).

    python tests/helpers/fuzz_files.py 300 [--seed 0]     # also run by ./build.sh fuzz

Seed s mutates file KINDS[s % len(KINDS)] with random.Random(s): 1-8 bit flips, a truncation,
or both (a third of the seeds each); hostile_cases.py's fixed mutations are the CI's regression
set, this draws new ones for as many seeds as asked.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "core"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import kernelgen as kg  # noqa: E402
import hostile_cases  # noqa: E402
import hostile_report  # noqa: E402

KINDS = ("manifest", "kernel", "weights", "safetensors", "onnx")


def mutate(blob: bytes, rng: random.Random) -> bytes:
  """`blob` with 1-8 bits flipped, cut short, or both (a third of the draws each)."""
  how = rng.randrange(3)
  data = bytearray(blob)
  if how != 1:
    for _ in range(rng.randint(1, 8)):
      data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
  if how != 0:
    data = data[:rng.randrange(len(data))]
  return bytes(data)


class Files:
  """The valid files, made once under `work`: a PTX bundle and its parts, a safetensors file,
  an ONNX model (None where the onnx package is missing)."""

  def __init__(self, work: Path):
    self.work = work
    self.bundle = work / "bundle"
    x = kg.Tensor.empty(2, 4, name="x")
    kg.export({"out": (x * kg.Tensor([[1.0, 2.0, 3.0, 4.0]] * 2)).sum(1)}, str(self.bundle),
              format="ptx")
    self.manifest = json.loads((self.bundle / "manifest.json").read_text())
    self.kernel = self.manifest["kernels"][0]["file"]
    self.blobs = {"manifest": (self.bundle / "manifest.json").read_bytes(),
                  "kernel": (self.bundle / self.kernel).read_bytes(),
                  "weights": (self.bundle / self.manifest["weights_file"]).read_bytes()}
    path = work / "w.safetensors"
    kg.save({"a": kg.Tensor.arange(12, device="PYTHON").reshape(3, 4).float(),
             "b": kg.Tensor([1, 2, 3], dtype="int32", device="PYTHON")}, str(path))
    self.blobs["safetensors"] = path.read_bytes()
    try:
      self.blobs["onnx"] = hostile_cases._chain_model(6)
    except ImportError:
      self.blobs["onnx"] = None

  def case(self, seed: int) -> hostile_cases.Case | None:
    """The Case of `seed` (None: its kind needs a package that is missing)."""
    kind = KINDS[seed % len(KINDS)]
    if self.blobs[kind] is None:
      return None
    blob = mutate(self.blobs[kind], random.Random(seed))
    return hostile_cases.Case(kind, f"seed {seed}", self._run(kind, blob), "either")

  def _run(self, kind: str, blob: bytes):
    if kind == "safetensors":
      return lambda: {k: v.numpy() for k, v in kg.load(blob, device="PYTHON").items()}
    if kind == "onnx":
      return hostile_cases._run_onnx(blob, {"x": np.ones(2, np.float32)})
    name = {"manifest": "manifest.json", "kernel": self.kernel,
            "weights": self.manifest["weights_file"]}[kind]

    def run():
      folder = self.work / "mutated"
      if folder.exists():
        for f in folder.iterdir():
          f.unlink()
      else:
        folder.mkdir()
      for part, data in self.blobs.items():
        if part in ("manifest", "kernel", "weights"):
          target = {"manifest": "manifest.json", "kernel": self.kernel,
                    "weights": self.manifest["weights_file"]}[part]
          (folder / target).write_bytes(blob if target == name else data)
      out = kg.load_bundle(str(folder)).run({"x": np.ones((2, 4), np.float32)}, device="PTXSIM")
      return out["out"].numpy()
    return run


def fuzz(count: int, start: int = 0, out=sys.stdout) -> list[dict]:
  """Run seeds start..start+count-1; one row per case: {kind, seed, outcome, detail}."""
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    files = Files(Path(tmp))
    for seed in range(start, start + count):
      case = files.case(seed)
      if case is None:
        continue
      outcome, detail = hostile_report.classify(case, hostile_cases.SECRET)
      rows.append({"kind": case.category, "seed": seed, "outcome": outcome, "detail": detail})
      if outcome != "handled":
        print(f"{outcome:>7}  {case.category} seed {seed}: {detail}", file=out, flush=True)
  return rows


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("count", nargs="?", type=int, default=300)
  parser.add_argument("--seed", type=int, default=0, help="first seed")
  parser.add_argument("--json", action="store_true", help="one JSON object per case")
  args = parser.parse_args(argv)
  hostile_report._limit_memory()
  begin = time.perf_counter()
  rows = fuzz(args.count, args.seed)
  if args.json:
    for row in rows:
      print(json.dumps(row))
  totals = hostile_report.totals([{"category": r["kind"], **r} for r in rows])
  print(hostile_report.table(totals))
  bad = sum(r["outcome"] != "handled" for r in rows)
  print(f"{len(rows)} mutated files in {time.perf_counter() - begin:.0f} s: {bad} not handled")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
