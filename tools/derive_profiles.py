"""Derive the compact performance data shipped in `workbench/perf/data/` from the measured profiles.

Run from the repository root (needs the shared data folder, which users do not have):

    python tools/derive_profiles.py [--data /work/shared/data] [--out workbench/perf/data]

Writes two files:

- `pollux.json`: per Pollux application (Apache-2.0 data, attribution inside the file), the
  step/sync times of `placements.csv` averaged per multiset of replicas-per-node (the artifact
  keys a placement by its smallest rotation; a multiset merges those rotations) and per local
  batch size; the same averaged per (num_nodes, num_replicas) for the grid used for other
  placements (placements.csv rows grouped as in the artifact, plus scalability.csv); and the
  validation curves (iteration, metric, grad_sqr, grad_var per epoch); and, under "filled",
  the rows of the single rotation the artifact looks up for a largest-first node sequence,
  per multiset measured in several rotations (`PerfModel(throughput="artifact")`). Floats are
  rounded to 6 significant digits.
- `ps_fit.json`: per DL2 model, only the fitted Optimus coefficients
  speed = 1 / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p) and the fit's error figures. The raw DL2
  measurements (config_speed.txt, no licence) are NOT copied.

The PS fit: speed is DL2's unit, the sum over workers of per-worker speeds (DL2 divides it by an
epoch size counted in mini-batches, so: mini-batches per second summed over workers). M is the
batch field of the data. Failed runs are dropped (zero speed, or below half of both neighbours in
workers at the same PS count, e.g. vgg-16 at 1 PS × 11 workers = 0.48); the fit is a
nonnegative least squares on relative error (rows of 1/speed scaled by speed). Errors are stored
over all kept points, and split by w <= 2 / w > 2 (the form over-predicts 1-2 workers on few PS).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80,
              "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}  # the artifact's override; others: max measured local batch

PS_MODELS = ("resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq",
             "cnn-text-classification", "dssm", "wlm")
# DL2 per-model facts (pengyanghua/DL2 trace.py): local compute time per batch (s), model size
# (MB), epoch size (mini-batches per epoch) and the job length share of MAX_NUM_EPOCHS.
PS_COMPUTE = (0.449, 0.535, 0.226, 0.815, 0.075, 0.585, 0.567, 0.154)
PS_MODEL_MB = (102.2, 553.4, 6.92, 42.1, 36.5, 24.0, 6.0, 19.2)
PS_EPOCH_SIZE = (115, 115, 390, 120, 780, 193, 349, 165)
PS_EPOCH_SHARE = (0.3, 0.96, 0.05, 0.54, 0.95, 0.46, 0.33, 0.23)
PS_TESTBED_MAX_EPOCHS = 1000  # DL2 parameters.py, TESTBED setting

POLLUX_NOTICE = ("Derived from the Pollux OSDI'21 artifact (petuum/adaptdl, branch osdi21-artifact,"
                 " commit c793c70, simulator/traces), Copyright Petuum, Inc., Apache License 2.0."
                 " Averaged and rounded by tools/derive_profiles.py.")
DL2_NOTICE = ("Coefficients fitted to the DL2 testbed speeds (pengyanghua/DL2 commit 2e54920,"
              " config_speed.txt); only fitted figures are shipped, not the measurements.")


def r6(x: float) -> float:
    return float(f"{x:.6g}")


def read_csv(path: Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def curve(rows: list[tuple[float, float, float]]) -> list[list[float]]:
    """rows of (local_bsz, step, sync) -> [[bsz...], [step...], [sync...]] averaged per bsz."""
    acc: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for b, st, sy in rows:
        acc[b].append((st, sy))
    bs = sorted(acc)
    return [[r6(b) for b in bs],
            [r6(float(np.mean([v[0] for v in acc[b]]))) for b in bs],
            [r6(float(np.mean([v[1] for v in acc[b]]))) for b in bs]]


def filled_order_curves(by_multiset: dict[str, list], by_rotation: dict[str, list]) -> dict:
    """Per multiset measured in several rotations, the rows of the one rotation the artifact's
    lookup finds for nodes filled most-free-first (a largest-first sequence, e.g. 4,4,2,2 ->
    its smallest rotation 2244); multisets with one rotation are `placements` already."""
    measured = defaultdict(int)
    for rotation in by_rotation:
        measured[",".join(sorted(rotation, reverse=True))] += 1
    out = {}
    for key in sorted(by_multiset):
        seq = key.split(",")
        if measured[key] > 1:
            out[key] = curve(by_rotation[min("".join(seq[i:] + seq[:i]) for i in range(len(seq)))])
    return out


def derive_app(app_dir: Path, app: str) -> dict:
    placements = read_csv(app_dir / "placements.csv")
    by_multiset: dict[str, list] = defaultdict(list)
    by_rotation: dict[str, list] = defaultdict(list)
    by_grid: dict[str, list] = defaultdict(list)
    for row in placements:
        digits = [int(c) for c in str(int(row["placement"]))]
        key = ",".join(str(c) for c in sorted(digits, reverse=True))
        item = (row["local_bsz"], row["step_time"], row["sync_time"])
        by_multiset[key].append(item)
        by_rotation["".join(map(str, digits))].append(item)
        by_grid[f"{len(digits)},{sum(digits)}"].append(item)
    for row in read_csv(app_dir / "scalability.csv"):
        key = f"{int(row['num_nodes'])},{int(row['num_replicas'])}"
        by_grid[key].append((row["local_bsz"], row["step_time"], row["sync_time"]))
    validation = {}
    for path in sorted(app_dir.glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[1])):
        rows = read_csv(path)
        validation[path.stem.split("-")[1]] = {
            col: [r6(r[col]) for r in rows]
            for col in ("iteration", "metric", "grad_sqr", "grad_var")}
    first = validation[min(validation, key=int)]["metric"]
    return {
        "max_epochs": MAX_EPOCHS[app],
        "max_local_bsz": int(MAX_LOCAL_BSZ.get(app, max(r["local_bsz"] for r in placements))),
        "metric_increases": bool(first[0] < first[-1]),
        "placements": {k: curve(v) for k, v in sorted(by_multiset.items())},
        "filled": filled_order_curves(by_multiset, by_rotation),
        "grid": {k: curve(v) for k, v in sorted(by_grid.items(),
                                                  key=lambda kv: tuple(map(int, kv[0].split(","))))},
        "validation": validation,
    }


def ps_features(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return np.column_stack([m / w, np.ones_like(w), w / p, w, p])


def _solve_relative(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """NNLS of x·θ = 1/s in relative terms: rows scaled by s, so Σ(s·x·θ - 1)² is minimised."""
    theta, _ = nnls(x * s[:, None], np.ones(len(s)))
    return theta


def _failed_runs(p: np.ndarray, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Failed or stalled runs: speed below half of the neighbours on both sides in workers (within
    2) at the same PS count, e.g. vgg-16 at 1 PS x 11 workers: 0.48 between 3.05 and 2.74."""
    bad = np.zeros(len(s), bool)
    for i in range(len(s)):
        same = (p == p[i]) & (s > 0)
        below = s[same & (w < w[i]) & (w >= w[i] - 2)]
        above = s[same & (w > w[i]) & (w <= w[i] + 2)]
        if len(below) and len(above):
            bad[i] = s[i] < 0.5 * min(below.min(), above.min())
    return bad


def fit_ps(records: list[tuple]) -> dict:
    out = {}
    for i, model in enumerate(PS_MODELS):
        rows = [r for r in records if r[0] == model]
        m = float(rows[0][2])
        p = np.array([r[3] for r in rows], float)
        w = np.array([r[4] for r in rows], float)
        s = np.array([sum(r[5]) for r in rows], float)
        ok = s > 0
        ok &= ~_failed_runs(p, w, s)
        p, w, s = p[ok], w[ok], s[ok]
        x = ps_features(w, p, m)
        theta = _solve_relative(x, s)
        rel = np.abs(1.0 / (x @ theta) / s - 1.0)
        few = w <= 2
        out[model] = {
            "theta": [float(f"{t:.8g}") for t in theta],
            "batch": m,
            "compute_time": PS_COMPUTE[i],
            "model_mb": PS_MODEL_MB[i],
            "epoch_size": PS_EPOCH_SIZE[i],
            "epochs": round(PS_EPOCH_SHARE[i] * PS_TESTBED_MAX_EPOCHS),
            "points": len(s),
            "dropped": int((~ok).sum()),
            "max_ps": int(p.max()),
            "max_workers": int(w.max()),
            "median_rel_err": r6(float(np.median(rel))),
            "mean_rel_err": r6(float(np.mean(rel))),
            "p90_rel_err": r6(float(np.quantile(rel, 0.9))),
            "max_rel_err": r6(float(np.max(rel))),
            "mean_rel_err_w_le_2": r6(float(np.mean(rel[few]))),
            "mean_rel_err_w_gt_2": r6(float(np.mean(rel[~few]))),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "workbench/perf/data")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pollux = {"notice": POLLUX_NOTICE, "license": "Apache-2.0",
              "apps": {a: derive_app(args.data / "pollux/profiles" / a, a) for a in APPS}}
    with open(args.data / "dl2/config_speed.txt") as f:
        records = [ast.literal_eval(line) for line in f if line.strip()]
    ps = {"notice": DL2_NOTICE,
          "form": "speed = 1/(t0*M/w + t1 + t2*w/p + t3*w + t4*p), mini-batches/s summed over"
                  " workers; M = batch field",
          "models": fit_ps(records)}
    for name, obj in (("pollux.json", pollux), ("ps_fit.json", ps)):
        path = args.out / name
        path.write_text(json.dumps(obj, separators=(",", ":")) + "\n")
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    for model, fit in ps["models"].items():
        print(f"{model:25s} rel err mean {fit['mean_rel_err']:.3f} median"
              f" {fit['median_rel_err']:.3f} max {fit['max_rel_err']:.3f};"
              f" w<=2 {fit['mean_rel_err_w_le_2']:.3f}, w>2 {fit['mean_rel_err_w_gt_2']:.3f};"
              f" dropped {fit['dropped']} of {fit['points'] + fit['dropped']}")
    assert all(math.isfinite(t) for f in ps["models"].values() for t in f["theta"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
