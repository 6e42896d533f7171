"""`workbench train dl2`: train the DL2 policy network from a seed (supervised warm-up on DRF, then
policy gradient) and write its weights; with the default settings it reproduces the shipped ones."""

from __future__ import annotations

import csv
import io
import sys
import time
from dataclasses import asdict

from .. import argtypes
from ..errors import ConfigError
from ..output import atomic_open, atomic_path, check_separate, check_writable, emit


def _bar(enabled: bool):
    start = time.perf_counter()

    def show(phase: str, step: int, total: int, row: dict) -> None:
        if not enabled:
            return
        frac = step / max(total, 1)
        label = "supervised (DRF)" if phase == "sl" else "reinforcement  "
        extra = f"loss {row['loss']:.3f}" if phase == "sl" else f"train JCT {row['train_jct_h']:.3f} h"
        if "val_jct_h" in row:
            extra += f", val JCT {row['val_jct_h']:.3f} h"
        sys.stderr.write(f"\r{label} [{'#' * int(frac * 30):<30}] {step:3d}/{total}"
                         f"  {extra:<40}  {time.perf_counter() - start:5.0f} s")
        if step == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def run_train_dl2(args) -> int:
    import numpy as np

    from ..policies.dl2 import PolicyNet, TrainConfig, shipped_weights_path, train_dl2
    from ..scenarios import dl2_training

    cfg, setting = (dl2_training(args.scenario, args.seed) if args.scenario
                    else (TrainConfig(seed=args.seed), None))
    if args.quick:
        cfg.sl_traces, cfg.sl_epochs, cfg.rl_iters, cfg.val_traces = 4, 5, 4, 2
    # the warm-up averages over its traces: none printed NumPy's warnings and "nan h"
    for name, least in (("sl_epochs", 0), ("rl_iters", 0), ("sl_traces", 1)):
        value = getattr(args, name)
        if value is not None:
            if value < least:
                raise ConfigError(f"--{name.replace('_', '-')}: expected >= {least}, got {value}")
            setattr(cfg, name, value)
    shipped_path = shipped_weights_path(args.scenario or "")
    out = str(shipped_path) if args.install else args.out
    check_writable(out, "--out")  # before the training, not after it
    if args.curve:
        check_writable(args.curve, "--curve")
    check_separate([("--out", out), ("--curve", args.curve)])
    show = _bar(sys.stderr.isatty() and not args.json or args.progress)
    started = time.perf_counter()
    net, curve = train_dl2(cfg, progress=show, setting=setting)
    seconds = time.perf_counter() - started
    meta = asdict(cfg)
    with atomic_path(out, "--out") as tmp:
        net.save(tmp, meta)
    if args.curve:
        keys = list(dict.fromkeys(k for row in curve for k in row))
        with atomic_open(args.curve, "--curve", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(curve)
    same = None
    try:
        if args.install:
            raise FileNotFoundError  # it was just written there: nothing to compare with
        with shipped_path.open("rb") as f:
            shipped, shipped_meta = PolicyNet.load(io.BytesIO(f.read()))
        trained, _ = PolicyNet.load(out)
        same = all(np.allclose(trained.params[k], shipped.params[k], atol=1e-6)
                   for k in trained.params) and shipped_meta.get("seed") == cfg.seed
    except (FileNotFoundError, KeyError, ValueError):
        pass
    last_sl = [r for r in curve if r["phase"] == "sl" and "val_jct_h" in r]
    last_rl = [r for r in curve if r["phase"] == "rl" and "val_jct_h" in r]
    summary = {
        "seed": cfg.seed, "weights": out, "seconds": seconds,
        "teacher_val_jct_h": curve[0]["teacher_jct_h"] if curve else None,
        "after_sl_val_jct_h": last_sl[-1]["val_jct_h"] if last_sl else None,
        "after_rl_val_jct_h": last_rl[-1]["val_jct_h"] if last_rl else None,
        "imitation_accuracy": last_sl[-1].get("accuracy") if last_sl else None,
        "matches_shipped": same,
    }
    result = {"summary": summary, "config": asdict(cfg), "curve": curve}
    rows = [{k: r.get(k) for k in ("phase", "step", "loss", "accuracy", "train_jct_h", "val_jct_h",
                                   "entropy")} for r in curve if "val_jct_h" in r]
    emit(result, as_json=args.json, tables={"learning curve (validation rows)": rows},
         notes=[f"weights written to {out} in {seconds:.0f} s (seed {cfg.seed})",
                ("validation avg JCT (slot environment): DRF teacher"
                f" {_h(summary['teacher_val_jct_h'])}, after warm-up"
                f" {_h(summary['after_sl_val_jct_h'])}, after RL {_h(summary['after_rl_val_jct_h'])}"),
                f"installed as the shipped weights ({out})" if args.install else
                "identical to the shipped weights" if same else
                "differs from the shipped weights (other seed or settings)" if same is False else
                "no shipped weights to compare with"])
    return 0


def _h(hours) -> str:
    return "-" if hours is None else f"{hours:.3f} h"


def register(sub) -> None:
    p = sub.add_parser("train", help="train a learning engine's model (dl2)")
    tsub = p.add_subparsers(dest="engine", metavar="ENGINE", required=True)
    d = tsub.add_parser("dl2", help="supervised warm-up on DRF, then policy gradient")
    d.add_argument("--seed", type=argtypes.seed, default=0, help="seed of every random choice (default 0:"
                   " the shipped weights)")
    d.add_argument("--out", default="dl2.npz", help="where to write the weights (default dl2.npz)")
    d.add_argument("--install", action="store_true",
                   help="write into the package as the shipped weights")
    d.add_argument("--curve", help="write the learning curve to this CSV file")
    d.add_argument("--scenario", default=None,
                   help="train on a paper scenario's cluster and workloads (dl2-paper), with"
                   " a smaller budget; --install then writes that scenario's shipped weights")
    d.add_argument("--sl-epochs", type=int, default=None)
    d.add_argument("--sl-traces", type=int, default=None)
    d.add_argument("--rl-iters", type=int, default=None)
    d.add_argument("--quick", action="store_true", help="a tiny run (seconds), for trying it out")
    d.add_argument("--progress", action="store_true", help="progress bar even when not a terminal")
    d.add_argument("--json", action="store_true", help="print the curve and summary as JSON")
    d.set_defaults(func=run_train_dl2)
