"""bench/peers.py's results, run by run and across runs (issue 43: what holds).

A run: every row's systems on one adapter in a fresh browser (bench/peers.py run_adapter), each
system's best of its interleaved rounds, by wall time (submit -> done) and, where the system has
them, by GPU timestamps. Per run and row, the ratio is the best correct peer's time / ours, both
ways. Across runs: the median and the worst (lowest) of the counted runs' ratios; a row holds
(>= TARGET) only when its worst counted run does. A run counts when the machine's load average
(1 min) was at most peers.MAX_LOAD before it and other processes used at most peers.MAX_FOREIGN
cores during it (bench/foreign_cpu.py), or when the caller allows load (--allow-load); a run not
counted is listed with its load and foreign cores, never silently.
"""
from __future__ import annotations

import statistics

SYSTEMS = ("kernelgen", "tinygrad", "tfjs", "ort")
PEERS = SYSTEMS[1:]
TARGET = 1.5


def status(r: dict) -> str:
  """A system's check in one run: ok, WRONG (its error) or failed (why)."""
  if "error" in r:
    return "failed: " + r["error"][:80]
  if not r.get("ok"):
    return f"WRONG (max err {r.get('max_error', float('nan')):.2g}, {r.get('bad')} bad)"
  return "ok"


def best_peer(row: dict, key: str):
  """(peer, ms) of the fastest correct peer in `key` ("ms" or "gpu_ms"), or (None, None)."""
  good = {s: row[s][key] for s in PEERS if row.get(s, {}).get("ok") and key in row[s]}
  if not good:
    return None, None
  best = min(good, key=good.get)
  return best, good[best]


def summarize(adapter: str, result: dict) -> list[dict]:
  """One run on one adapter: a summary entry per row (ratios, bounds, submit floor)."""
  out = []
  for name, row in result["rows"].items():
    ours = row.get("kernelgen", {})
    ok = ours.get("ok")
    best, peer_ms = best_peer(row, "ms")
    gpu_best, gpu_peer_ms = best_peer(row, "gpu_ms")
    entry = {"adapter": adapter, "row": name, "ours_ms": ours.get("ms") if ok else None,
             "best_peer": best, "peer_ms": peer_ms,
             "ours_gpu_ms": ours.get("gpu_ms") if ok else None, "gpu_best_peer": gpu_best,
             "gpu_peer_ms": gpu_peer_ms,
             "kernels": {s: row.get(s, {}).get("kernels") for s in SYSTEMS},
             "status": {s: status(row.get(s, {})) for s in SYSTEMS},
             "ms": {s: row.get(s, {}).get("ms") for s in SYSTEMS},
             "gpu_ms": {s: row.get(s, {}).get("gpu_ms") for s in SYSTEMS}}
    if entry["ours_ms"] and peer_ms:
      entry["ratio"] = peer_ms / entry["ours_ms"]
    if entry["ours_gpu_ms"] and gpu_peer_ms:
      entry["gpu_ratio"] = gpu_peer_ms / entry["ours_gpu_ms"]
    if "floor" in row and entry["ours_ms"]:
      entry["floor"] = {k: row["floor"][k] for k in ("dispatches", "best_ms", "median_ms")}
      entry["ours_median_ms"] = statistics.median(ours["samples_ms"])
    if "copy" in row and entry["ours_ms"]:
      c = row["copy"]
      entry["bound"] = {"ours_bytes_per_ms": c["bytes"] / entry["ours_ms"],
                        "copy_bytes_per_ms": c["bytes"] / c["ms"], "copy_ms": c["ms"]}
    out.append(entry)
  return out


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def counts(run: dict, max_load: float, max_foreign: float) -> bool:
  """A run counts: started at a load average <= max_load, and other processes took at most
  max_foreign cores during it (where that is known; otherwise its load stayed <= max_load)."""
  foreign = run.get("foreign")
  if foreign is None:
    return max(run["load"]) <= max_load
  return run["load"][0] <= max_load and foreign <= max_foreign


def aggregate(adapter: str, runs: list[dict], allow_load: bool, max_load: float,
              max_foreign: float = 0.25) -> list[dict]:
  """Across runs on one adapter: per row the median and worst of the counted runs' ratios (wall
  and GPU), each system's median time, and whether the row holds (its worst counted run >=
  TARGET). runs: {"result": run_adapter's result, "load": [before, max during, after]}."""
  per_run = [summarize(adapter, r["result"]) for r in runs]
  loads = [r["load"] for r in runs]
  counted = [i for i, r in enumerate(runs) if allow_load or counts(r, max_load, max_foreign)]
  out = []
  for k, first in enumerate(per_run[0]):
    entries = [p[k] for p in per_run]
    use = [entries[i] for i in counted]
    entry = {**first, "runs": len(entries), "counted": len(use), "loads": loads,
             "foreign": [r.get("foreign") for r in runs],
             "run_ratios": [e.get("ratio") for e in entries],
             "run_gpu_ratios": [e.get("gpu_ratio") for e in entries],
             "status": {s: next((e["status"][s] for e in entries if e["status"][s] != "ok"), "ok")
                        for s in SYSTEMS},
             "ms": {s: _median(e["ms"][s] for e in entries) for s in SYSTEMS},
             "gpu_ms": {s: _median(e["gpu_ms"][s] for e in entries) for s in SYSTEMS}}
    entry["ours_ms"], entry["peer_ms"] = (_median(e["ours_ms"] for e in entries),
                                          _median(e["peer_ms"] for e in entries))
    entry["ours_gpu_ms"], entry["gpu_peer_ms"] = (_median(e["ours_gpu_ms"] for e in entries),
                                                  _median(e["gpu_peer_ms"] for e in entries))
    for key in ("ratio", "gpu_ratio"):
      values = [e.get(key) for e in use]
      whole = bool(use) and all(v is not None for v in values)
      entry[key] = statistics.median(values) if whole else None
      entry[f"{key}_worst"] = min(values) if whole else None
    entry["holds"] = None if entry["ratio_worst"] is None else entry["ratio_worst"] >= TARGET
    for key in ("best_peer", "gpu_best_peer"):   # the peer best in most counted runs
      names = [e[key] for e in use or entries if e[key]]
      entry[key] = max(names, key=names.count) if names else None
    out.append(entry)
  return out


def _ratio_cell(e: dict, key: str) -> str:
  if e.get(key) is None:
    return "-" if not e["counted"] else "n/a"
  return f"{e[key]:.2f} / {e[key + '_worst']:.2f}"


def print_table(summary: list[dict]) -> None:
  """The table: per row each system's median (over runs) of its best wall ms, the wall ratio's
  median / worst over counted runs, our and the best peer's GPU-timestamp ms and that ratio,
  the runs counted, and whether the row holds >= TARGET."""
  head = ["adapter", "workload", "kernelgen", "tinygrad", "tfjs", "ort", "wall best/ours",
          "gpu kg", "gpu peer", "gpu best/ours", "runs", f">={TARGET}x", "kernels kg/tg/tf/ort"]
  lines = [head]
  for e in summary:
    cells = [e["adapter"], e["row"]]
    for s in SYSTEMS:
      ms, st = e["ms"].get(s), e["status"][s]
      cells.append(f"{ms:.3g} ms" if st == "ok" and ms is not None else
                   ("WRONG" if st.startswith("WRONG") else "failed"))
    cells.append(_ratio_cell(e, "ratio") + (f" ({e['best_peer']})" if e.get("best_peer") else ""))
    cells.append("-" if e.get("ours_gpu_ms") is None else f"{e['ours_gpu_ms']:.3g} ms")
    cells.append("-" if e.get("gpu_peer_ms") is None else
                 f"{e['gpu_peer_ms']:.3g} ms ({e['gpu_best_peer']})")
    cells.append(_ratio_cell(e, "gpu_ratio"))
    cells.append(f"{e['counted']}/{e['runs']}")
    cells.append({True: "yes", False: "NO", None: "-"}[e["holds"]])
    cells.append("/".join("-" if e["kernels"][s] is None else str(e["kernels"][s])
                          for s in SYSTEMS))
    lines.append(cells)
  widths = [max(len(str(c[i])) for c in lines) for i in range(len(head))]
  for i, line in enumerate(lines):
    print(" | ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    if i == 0:
      print("-|-".join("-" * w for w in widths))
  print_notes(summary)


def print_notes(summary: list[dict]) -> None:
  """Per-run ratios and loads, every row's bounds (copy kernel; with a FLOP count, the
  multiply-add peak; below TARGET, the submit floor), demo frames, failures."""
  for e in summary:
    runs = "; ".join(
      f"run {i + 1}: {'-' if r is None else f'{r:.2f}'} wall"
      f"{'' if g is None else f', {g:.2f} gpu'} (load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}"
      f"{'' if f is None else f', others {f:.2f} cores'})"
      for i, (r, g, load, f) in enumerate(zip(e["run_ratios"], e["run_gpu_ratios"], e["loads"],
                                              e.get("foreign") or [None] * len(e["loads"]))))
    print(f"  {e['adapter']} {e['row']}: {runs}")
  for e in summary:
    below = e.get("ratio_worst") is not None and e["ratio_worst"] < TARGET
    if "bound" in e:
      b = e["bound"]
      label = f"below {TARGET}x" if below else "bounds"
      print(f"  {label}: {e['adapter']} {e['row']}: ours moves "
            f"{b['ours_bytes_per_ms'] / 1e6:.3g} GB/s (inputs + output once), a copy kernel of "
            f"the same bytes {b['copy_bytes_per_ms'] / 1e6:.3g} GB/s ({b['copy_ms']:.3g} ms)")
      if e.get("flops") and e.get("peak"):
        print(f"    ours {e['flops'] / e['ours_ms'] / 1e6:.3g} GFLOP/s against the adapter's "
              f"multiply-add peak {e['peak']['gflops']:.3g} GFLOP/s (registers only)")
      if "floor" in e and below:
        f = e["floor"]
        print(f"    its submit floor: {f['dispatches']} trivial dispatches (one thread storing "
              f"one value each) best / median {f['best_ms']:.3g} / {f['median_ms']:.3g} ms; "
              f"ours {e['ours_ms']:.3g} / {e['ours_median_ms']:.3g} ms")
  for e in summary:
    if "(demo)" in e["row"] and e["ours_ms"]:
      target = " (target < 16 ms)" if e["adapter"] == "lavapipe" else ""
      print(f"  demo frame, GPU time: {e['row']} on {e['adapter']}: kernelgen "
            f"{e['ours_ms']:.3g} ms{target}")
  for e in summary:
    for s in SYSTEMS:
      if e["status"][s] != "ok":
        print(f"  {e['adapter']} {e['row']} {s}: {e['status'][s]}")
