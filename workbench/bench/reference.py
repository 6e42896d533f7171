"""`workbench bench reference`: our engines on the Pollux workloads beside the artifact's figures.

The reference is the Pollux OSDI'21 artifact (petuum/adaptdl, branch osdi21-artifact, commit
c793c70): its simulator on 16 nodes x 4 GPUs, 60 s rounds, the 8 workloads at 0.5x, 1.0x,
1.5x and 2.0x relative job load (`simulator/workloads*/workload-N.csv`, here read from
`../shared/data/pollux`, the same files). Each run prints our average JCT beside the
artifact's, the difference and the wall seconds of the run.

Job lengths (`--lengths`): `project` is the loader's (iterations to the application's last
epoch in the validation table at the job's batch size, `traces/pollux.py`); `artifact` is the
artifact simulator's own definition (see `artifact_iterations`), so that a difference in that
column is the engines', not the job lengths'. Both are printed by default for tiresias and
optimus; pollux changes batch sizes, so its jobs always count the artifact's progress units
(`pollux_job`) and its rows say `artifact`.

The artifact gives Tiresias each job's replicas and batch size, Optimus only the batch size (its
replica cap is the engine's own, `OptimusPolicy.cap`) and Pollux neither: so for optimus a job's
`max_workers` is widened to the cluster's GPUs here.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import time
from functools import cache
from pathlib import Path

from ..clusters import preset
from ..errors import InputError
from ..output import emit

LOADS = ("0.5", "1.0", "1.5", "2.0")
ENGINES = ("tiresias", "optimus", "pollux")
DEFAULT_DIR = Path("..") / "shared" / "data" / "pollux"
DATA_ENV = "WORKBENCH_POLLUX_DATA"

# Average JCT (seconds) per workload 1..8, rounded to 4 decimals: the artifact's published raw
# results for its Figure 8a, simulator/results-jobload/<engine>-<load>/summary.json "avgs"
# (osdi21-artifact, commit c793c70). Running the artifact's simulator unmodified (python 3.11,
# numpy 1.26, pandas 1.5.3, scipy 1.11, `simulator.py --policy P workloads-L/workload-N.csv`,
# 2026-11-23) reproduced every figure checked to the last digit (docs/reference-results.md
# lists which).
REFERENCE: dict[str, dict[str, tuple[float, ...]]] = {
    "tiresias": {
        "0.5": (1450.9375, 2333.275, 1869.9, 1946.7625, 1425.3875, 1826.575, 3979.15, 1899.95),
        "1.0": (2473.65, 5144.9625, 3876.2562, 3280.2625, 3501.0125, 3469.6937, 5479.9125,
                5079.7063),
        "1.5": (5520.2917, 6333.7708, 6561.9792, 5577.3208, 6832.4208, 5830.4833, 5366.7833,
                7435.75),
        "2.0": (10138.175, 8655.9906, 10727.8188, 9664.7281, 12098.1031, 10254.6688, 8370.8469,
                10405.8062),
    },
    "optimus": {
        "0.5": (1309.6875, 3124.5625, 1986.8375, 2173.8625, 1324.525, 1957.9625, 5314.0,
                1971.475),
        "1.0": (4087.0625, 6913.875, 3944.0062, 5967.75, 5656.25, 5301.875, 7290.8562, 6293.7937),
        "1.5": (7673.8417, 6678.1875, 5683.625, 7683.7917, 7899.725, 7500.2542, 6426.1833,
                8331.3),
        "2.0": (10806.5969, 8515.3875, 8363.3563, 10312.9125, 11830.0438, 9767.2563, 6997.9688,
                11174.7938),
    },
    "pollux": {
        "0.5": (1059.5125, 1826.2625, 1310.525, 1497.7625, 976.8375, 1287.825, 2881.05,
                1432.0375),
        "1.0": (2088.7688, 3322.9437, 2188.4938, 2720.9812, 2673.7, 2446.1312, 3616.1438,
                2951.9062),
        "1.5": (3855.7792, 3380.5792, 3299.9167, 3902.675, 4007.3, 3474.2667, 3217.6292,
                4345.1167),
        "2.0": (6186.2594, 4190.8281, 5131.8375, 5262.4, 6590.8219, 5105.3125, 3836.325,
                6009.8125),
    },
}


def find_data_dir(named: str | None = None) -> Path:
    """The Pollux data folder: `named`, else $WORKBENCH_POLLUX_DATA, else `../shared/data/pollux`
    seen from the working directory or any directory above it."""
    for candidate in (named, os.environ.get(DATA_ENV)):
        if candidate:
            if Path(candidate).is_dir():
                return Path(candidate)
            raise InputError("no such directory", file=str(candidate))
    here = Path.cwd().resolve()
    for base in (here, *here.parents):
        if (base / DEFAULT_DIR).is_dir():
            return (base / DEFAULT_DIR).resolve()
    raise InputError("Pollux workloads not found: pass --data DIR (the artifact's simulator/"
                     " folder layout: workloads*/ and profiles/)", file=str(DEFAULT_DIR))


def workload_path(data: Path, load: str, n: int) -> Path:
    """The artifact's file for workload `n` at relative load `load` (1.0: `workloads/`)."""
    folder = "workloads" if load == "1.0" else f"workloads-{load}"
    return data / folder / f"workload-{n}.csv"


@cache
def _validation(profiles: str, app: str) -> dict[int, dict[str, list[float]]]:
    tables = {}
    for path in sorted(Path(profiles, app).glob("validation-*.csv")):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        tables[int(path.stem.rsplit("-", 1)[1])] = {
            k: [float(r[k]) for r in rows] for k in ("progress", "grad_sqr", "grad_var")}
    if not tables:
        raise InputError("no validation-*.csv", file=str(Path(profiles, app)))
    return dict(sorted(tables.items()))


def _between(tables: dict, batch: float, column: str, epoch: int) -> float:
    """A column at `epoch`, linear in batch size between the measured sizes around `batch`."""
    sizes = list(tables)
    lo = max((b for b in sizes if b <= batch), default=sizes[0])
    hi = min((b for b in sizes if b >= batch), default=sizes[-1])
    if lo == hi:
        return tables[lo][column][epoch]
    return ((batch - lo) * tables[hi][column][epoch]
            + (hi - batch) * tables[lo][column][epoch]) / (hi - lo)


def artifact_iterations(profiles: str | Path, app: str, batch: float, epochs: int) -> float:
    """Iterations a job of `app` at a fixed `batch` trains in the artifact's simulator.

    There a job advances in statistical-efficiency-weighted progress: per iteration it gains
    (var + sqr) / (var / scale + sqr), scale = batch / the app's smallest measured batch, with
    the gradient statistics of its current epoch (linear in batch between measured sizes);
    epoch e ends at the least `progress` of row e-1 over the validation files, and the job is
    done after `epochs` epochs (simulator.py Job.step, applications.py get_progress,
    get_grad_stats). So its iterations are the sum over epochs of the epoch's progress span
    over that epoch's gain."""
    tables = _validation(str(profiles), app)
    smallest = min(tables)
    ends = [0.0] + [min(t["progress"][e] for t in tables.values()) for e in range(epochs)]
    total = 0.0
    for e in range(epochs):
        sqr = _between(tables, batch, "grad_sqr", e)
        var = _between(tables, batch, "grad_var", e)
        gain = (var + sqr) / (var / (batch / smallest) + sqr)
        total += (ends[e + 1] - ends[e]) / gain
    return total


def load_jobs(data: Path, load: str, n: int, engine: str, lengths: str) -> list:
    """Workload `n` at `load` as the artifact gives it to `engine` (see the module docstring),
    with job lengths `project` or `artifact`."""
    from ..perf import default_perf
    from ..traces import load_pollux_workload

    jobs = list(load_pollux_workload(workload_path(data, load, n)))
    gpus = sum(node.gpus for node in preset("default"))
    if engine == "optimus":
        jobs = [dataclasses.replace(s, max_workers=gpus) for s in jobs]
    if engine == "pollux":
        return [pollux_job(s, data, gpus) for s in jobs]
    if lengths == "artifact":
        perf = default_perf()
        jobs = [dataclasses.replace(s, total_work=artifact_iterations(
            data / "profiles", s.application, s.batch_size, perf.max_epochs(s.application)))
            for s in jobs]
    return jobs


def pollux_job(spec, data: Path, gpus: int):
    """A workload job as the artifact gives it to Pollux (simulator.py `Cluster.__init__`): no
    replicas and no batch size, except ncf at a fixed batch of 32768. The others pick their
    batch (`adaptive_batch`), start from the app's smallest measured batch and run the
    artifact's progress units to its last epoch's end (`perf.goodput`); ncf runs the artifact's
    iterations at 32768 (`artifact_iterations`). Any job may take up to the cluster's GPUs (the
    engine's own cap applies)."""
    from ..perf import default_perf
    from ..perf.goodput import app_goodput

    perf = default_perf()
    app = app_goodput(perf, spec.application)
    common = {"initial_workers": 1, "min_workers": 1, "max_workers": gpus}
    if spec.application == "ncf":  # simulator.py: `job.target_batch_size = 32768` for ncf
        work = artifact_iterations(data / "profiles", "ncf", 32768, app.epochs)
        return dataclasses.replace(spec, batch_size=32768, total_work=work, **common)
    return dataclasses.replace(spec, batch_size=app.init_batch, total_work=app.total,
                               adaptive_batch=True, **common)


def run_one(data: Path, engine: str, load: str, n: int, lengths: str = "project") -> dict:
    """One engine on one workload: our average JCT beside the artifact's, and the seconds."""
    from ..experiment import run_policy

    jobs = load_jobs(data, load, n, engine, lengths)
    t0, c0 = time.perf_counter(), time.process_time()
    r = run_policy(preset("default"), jobs, engine, timeline_every=0.0, fragmentation=False)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ours = r.metrics["avg_jct_h"] * 3600
    ref = REFERENCE[engine][load][n - 1]
    refused = sum(not d.applied for d in r.controller.recorder.decisions)
    return {"engine": engine, "load": load, "workload": n, "lengths": lengths,
            "reference_s": ref, "ours_s": ours, "diff_pct": 100 * (ours / ref - 1),
            "completed": r.metrics["completed"], "refused": refused, "seconds": seconds,
            "cpu_s": cpu}  # CPU seconds: the wall time of a busy shared machine says little


def run(args) -> int:
    from ..policies import available

    data = find_data_dir(args.data)
    have = set(available())
    engines = [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in REFERENCE:
            raise InputError(f"no reference figures for {e!r}; known: {', '.join(REFERENCE)}",
                             file="--engines")
    loads = [x for x in args.loads.split(",") if x]
    for x in loads:
        if x not in LOADS:
            raise InputError(f"expected loads among {', '.join(LOADS)}, got {x!r}",
                             file="--loads")
    workloads = [int(x) for x in args.workloads.split(",") if x]
    rows, skipped = [], [e for e in engines if e not in have]
    for engine in [e for e in engines if e in have]:
        kinds = ["project"] if args.lengths != "both" else ["project", "artifact"]
        if args.lengths == "artifact" or engine == "pollux":
            kinds = ["artifact"]  # pollux: always the artifact's progress units (pollux_job)
        for load in loads:
            for n in workloads:
                for lengths in kinds:
                    rows.append(run_one(data, engine, load, n, lengths))
    summary = _summary(rows)
    notes = [("reference: Pollux OSDI'21 artifact (petuum/adaptdl osdi21-artifact c793c70),"
              " simulator/results-jobload/<engine>-<load>/summary.json; 16 x 4 GPUs, 60 s"
              " rounds"),
             ("lengths: project = the loader's job lengths; artifact = the artifact simulator's"
              " own (statistical-efficiency progress, `artifact_iterations`)")]
    if skipped:
        notes.append(f"not run (no such engine here): {', '.join(skipped)}")
    emit({"data": str(data), "results": rows, "summary": summary, "skipped": skipped},
         as_json=args.json,
         tables={"Average JCT (s): ours beside the Pollux artifact's": [
                     {k: _round(v) for k, v in r.items() if k not in ("completed",)}
                     for r in rows],
                 "Per engine, load and job lengths": summary},
         notes=notes)
    return 0


def _round(v):
    return round(v, 1) if isinstance(v, float) else v


def _summary(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["engine"], r["load"], r["lengths"]), []).append(r)
    out = []
    for (engine, load, lengths), rs in groups.items():
        diffs = [r["diff_pct"] for r in rs]
        out.append({"engine": engine, "load": load, "lengths": lengths, "runs": len(rs),
                    "mean_diff_pct": round(sum(diffs) / len(diffs), 1),
                    "min_diff_pct": round(min(diffs), 1), "max_diff_pct": round(max(diffs), 1),
                    "within_5pct": sum(abs(d) <= 5 for d in diffs),
                    "seconds": round(sum(r["seconds"] for r in rs), 1),
                    "cpu_s": round(sum(r["cpu_s"] for r in rs), 1)})
    return out


def register(sub) -> None:
    p = sub.add_parser("reference", help="tiresias/optimus/pollux on the Pollux workloads beside"
                                         " the Pollux artifact's figures")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--loads", default=",".join(LOADS))
    p.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    p.add_argument("--lengths", default="both", choices=("project", "artifact", "both"),
                   help="job lengths: the loader's, the artifact simulator's, or both")
    p.add_argument("--data", default=None,
                   help="folder with workloads*/ and profiles/ (default ../shared/data/pollux)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
