"""Print the gradient-check table: operation -> device -> max relative error of kernelgen's
gradients against central finite differences in float64 (tests/unit/test_autograd.py's checks).

    python tests/helpers/gradcheck_table.py            # runs the gradient checks, then prints the table
    python tests/helpers/gradcheck_table.py TABLE.json # prints a table test_autograd.py wrote before
                                               # (KERNELGEN_GRADCHECK_TABLE=TABLE.json pytest ...)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def run_checks(path: str) -> int:
  env = {**os.environ, "KERNELGEN_GRADCHECK_TABLE": path}
  return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         str(TESTS / "unit" / "test_autograd.py"), "-k", "gradcheck"], env=env,
                        cwd=TESTS.parent).returncode


def print_table(table: dict) -> None:
  devices = sorted({d for devs in table.values() for d in devs})
  width = max(len(name) for name in table)
  print(f"{'operation':<{width}}  " + "  ".join(f"{d:>10}" for d in devices))
  for name in sorted(table):
    cells = [f"{table[name][d]:10.2e}" if d in table[name] else f"{'-':>10}" for d in devices]
    print(f"{name:<{width}}  " + "  ".join(cells))
  worst = max(v for devs in table.values() for v in devs.values())
  print(f"\n{len(table)} operations; largest relative error {worst:.2e} "
        f"(float64, central differences)")


def main(argv: list[str]) -> int:
  if argv:
    print_table(json.loads(Path(argv[0]).read_text()))
    return 0
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "gradcheck.json")
    code = run_checks(path)
    if not os.path.exists(path):
      print("the gradient checks wrote no table", file=sys.stderr)
      return code or 1
    print_table(json.loads(Path(path).read_text()))
  return code


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
