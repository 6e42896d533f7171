"""`workbench bench reference`: our engines on the Pollux workloads beside the artifact's figures.

The reference is the Pollux OSDI'21 artifact (petuum/adaptdl, branch osdi21-artifact, commit
c793c70): its simulator on 16 nodes x 4 GPUs, 60 s rounds, the 8 workloads at 0.5x, 1.0x,
1.5x and 2.0x relative job load (`simulator/workloads*/workload-N.csv`, here read from
`../shared/data/pollux`, the same files). Each run prints our average JCT beside the
artifact's, the difference and the wall seconds of the run.

Job lengths (`--lengths`), both the loader's (`load_pollux_workload(lengths=...)`):
`artifact`, its default, is the artifact simulator's own definition
(`perf.goodput.artifact_iterations`: statistical-efficiency-weighted progress), so that a
difference is the engines', not the job lengths'; `project` is the validation table's
iterations to the application's last epoch at the job's batch size (what the metric curves
count in). Both are printed by default for tiresias and optimus; pollux changes batch sizes, so its jobs always count the artifact's progress units
(`pollux_job`) and its rows say `artifact`.

The artifact's simulator, not only its engines, by default: step times looked up as it does
and fixed batches run as its jobs run them (`--throughput artifact`, `perf.artifact_perf`,
`perf/artifact.py`), rounds on its grid from t = 0 (`--rounds artifact`); `--throughput
project` and `--rounds first-event` give the project's. See docs/reference-results.md.

The artifact gives Tiresias each job's replicas and batch size, Optimus only the batch size (its
replica cap is the engine's own, `OptimusPolicy.cap`) and Pollux neither: so for optimus a job's
`max_workers` is widened to the cluster's GPUs here.

`--suite openb` (run by default beside `pollux`): the placement plugins on the Alibaba openb pod
lists as `workbench openb` replays them (`placement/replay.py`), under both protocols
(`--protocol default|artifact`), beside the FGD artifact's expected allocation figures
(`OPENB_REFERENCE`); see docs/openb-results.md.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ..clusters import preset
from ..errors import ConfigError, InputError
from ..output import emit
from ..perf.model import THROUGHPUTS

LOADS = ("0.5", "1.0", "1.5", "2.0")
ENGINES = ("tiresias", "optimus", "pollux")
SUITES = ("pollux", "openb")
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


# ---- openb: the FGD artifact's expected allocation -------------------------------------------

OPENB_TRACES = ("default", "gpushare40", "multigpu50", "cpu200")
OPENB_LOADS = (1.0, 1.3)
# The artifact's run-script names for our plugins (experiments/run_scripts/generate_run_scripts.py)
ARTIFACT_POLICY = {"random": "01-Random", "dot-product": "02-DotProd",
                   "gpu-clustering": "03-GpuClustering", "gpu-packing": "04-GpuPacking",
                   "best-fit": "05-BestFit", "fgd": "06-FGD"}
# Allocated GPU share, % of the 6,212 GPUs: (mean, sd) at 100% and at 130% of requested load.
# Source: the FGD artifact's published expected results, hkust-adsl/kubernetes-scheduler-
# simulator, experiments/analysis/expected_results/analysis_allo_discrete.csv (added in commit
# 1853fc0e79d74778719c8137d7ca31dd61729e4f, unchanged at 8f3d6417353c5083c6d56617f255fadd8dc306bc):
# rows workload=openb_pod_list_<trace>, sc_policy=<ARTIFACT_POLICY>, tune=1.3, seeds 42-51 (10
# rows each), columns "100" and "130" (its merge_alloc_discrete.py: the mean allocated share
# over the pods whose arrived GPUs round to that % of capacity). Each figure here is the mean
# (and sample sd, ddof=1) of those 10 published values, to 3 decimals; nothing else was done to
# them. Our artifact protocol reads allocation the same way; the default protocol at the first
# pod reaching that load. No figure is taken from the FGD paper (ATC'23) itself: its
# allocation results are plotted, and no value was read off a plot. Only the four traces the
# bench runs by default are copied (the file holds more); another trace given with --traces
# prints '-' in the reference columns.
OPENB_REFERENCE: dict[str, dict[str, tuple[tuple[float, float], tuple[float, float]]]] = {
    "default": {
        "random": ((86.303, 0.332), (87.470, 0.319)),
        "dot-product": ((90.622, 0.186), (90.849, 0.202)),
        "gpu-clustering": ((91.650, 0.610), (91.878, 0.625)),
        "gpu-packing": ((91.779, 0.532), (92.002, 0.545)),
        "best-fit": ((92.862, 0.144), (93.076, 0.134)),
        "fgd": ((95.227, 0.106), (95.391, 0.082)),
    },
    "gpushare40": {
        "random": ((84.864, 0.337), (86.002, 0.362)),
        "dot-product": ((89.304, 0.135), (89.559, 0.135)),
        "gpu-clustering": ((89.757, 0.616), (90.015, 0.588)),
        "gpu-packing": ((89.774, 0.530), (90.030, 0.503)),
        "best-fit": ((91.443, 0.198), (91.689, 0.210)),
        "fgd": ((93.961, 0.074), (94.148, 0.066)),
    },
    "multigpu50": {
        "random": ((81.282, 0.828), (90.275, 0.438)),
        "dot-product": ((94.728, 0.205), (94.850, 0.215)),
        "gpu-clustering": ((95.686, 0.284), (95.811, 0.294)),
        "gpu-packing": ((96.064, 0.307), (96.182, 0.314)),
        "best-fit": ((95.623, 0.183), (95.738, 0.187)),
        "fgd": ((97.094, 0.106), (97.178, 0.103)),
    },
    "cpu200": {
        "random": ((83.026, 0.273), (83.770, 0.337)),
        "dot-product": ((87.455, 0.613), (87.704, 0.624)),
        "gpu-clustering": ((89.667, 0.378), (89.921, 0.387)),
        "gpu-packing": ((89.979, 0.483), (90.225, 0.495)),
        "best-fit": ((92.152, 0.214), (92.400, 0.239)),
        "fgd": ((94.824, 0.159), (95.045, 0.156)),
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


def load_jobs(data: Path, load: str, n: int, engine: str, lengths: str,
              throughput: str = "project") -> list:
    """Workload `n` at `load` as the artifact gives it to `engine` (see the module docstring),
    with job lengths `project` or `artifact`. With the artifact's throughput and lengths a
    Tiresias job, whose replicas never change, trains at the batch the artifact's rounding
    gives it (`perf.artifact.artifact_batch`: bert at 384 on 12 replicas runs 360), for as many
    iterations as that batch needs."""
    from ..traces import load_pollux_workload

    jobs = list(load_pollux_workload(workload_path(data, load, n), lengths=lengths))
    gpus = sum(node.gpus for node in preset("default"))
    if engine == "tiresias" and throughput == "artifact" and lengths == "artifact":
        jobs = [_at_true_batch(s) for s in jobs]
    if engine == "optimus":
        jobs = [dataclasses.replace(s, max_workers=gpus) for s in jobs]
    if engine == "pollux":
        return [pollux_job(s, gpus) for s in jobs]
    return jobs


def _at_true_batch(spec):
    from ..perf import artifact_perf
    from ..perf.goodput import artifact_iterations

    perf = artifact_perf()
    run = perf.artifact_run(spec.application, spec.batch_size, spec.initial_workers)
    if run.batch == spec.batch_size:
        return spec
    return dataclasses.replace(spec, batch_size=run.batch,
                               total_work=artifact_iterations(spec.application, run.batch, perf))


def pollux_job(spec, gpus: int):
    """A workload job as the artifact gives it to Pollux (simulator.py `Cluster.__init__`): no
    replicas and no batch size, except ncf at a fixed batch of 32768. The others pick their
    batch (`adaptive_batch`), start from the app's smallest measured batch and run the
    artifact's progress units to its last epoch's end (`perf.goodput`); ncf runs the artifact's
    iterations at 32768 (`artifact_iterations`). Any job may take up to the cluster's GPUs (the
    engine's own cap applies)."""
    from ..perf import default_perf
    from ..perf.goodput import app_goodput, artifact_iterations

    perf = default_perf()
    app = app_goodput(perf, spec.application)
    common = {"initial_workers": 1, "min_workers": 1, "max_workers": gpus}
    if spec.application == "ncf":  # simulator.py: `job.target_batch_size = 32768` for ncf
        work = artifact_iterations("ncf", 32768, perf)
        return dataclasses.replace(spec, batch_size=32768, total_work=work, **common)
    return dataclasses.replace(spec, batch_size=app.init_batch, total_work=app.total,
                               adaptive_batch=True, **common)


ROUNDS = ("first-event", "artifact")
TAKES_PERF = ("optimus", "pollux")  # engines that predict step times (tiresias does not)


def run_one(data: Path, engine: str, load: str, n: int, lengths: str = "artifact",
            rounds: str = "artifact", throughput: str = "artifact") -> dict:
    """One engine on one workload: our average JCT beside the artifact's, and the seconds.
    `rounds`: the 60 s grid from the first arrival (our controller's) or, `artifact`, from
    t = 0 with the first round at 60 s (`Policy.round_origin`; the artifact's `simulate` loop:
    `Cluster.step(60)` advances, then decides). `throughput`: step times looked up as the
    artifact does (`perf.artifact_perf`), or the project's model, for the simulator and the
    engine alike."""
    from ..experiment import run_policy
    from ..perf import artifact_perf, default_perf
    from ..policies import make_policy

    perf = artifact_perf() if throughput == "artifact" else default_perf()
    jobs = load_jobs(data, load, n, engine, lengths, throughput)
    policy = make_policy(engine, **({"perf": perf} if engine in TAKES_PERF else {}))
    if rounds == "artifact":
        policy.round_origin = 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    r = run_policy(preset("default"), jobs, policy, timeline_every=0.0, fragmentation=False,
                   perf=perf)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ours = r.metrics["avg_jct_h"] * 3600
    ref = REFERENCE[engine][load][n - 1]
    refused = sum(not d.applied for d in r.controller.recorder.decisions)
    return {"engine": engine, "load": load, "workload": n, "lengths": lengths, "rounds": rounds,
            "throughput": throughput,
            "reference_s": ref, "ours_s": ours, "diff_pct": 100 * (ours / ref - 1),
            "completed": r.metrics["completed"], "refused": refused, "seconds": seconds,
            "cpu_s": cpu}  # CPU seconds: the wall time of a busy shared machine says little


def run(args) -> int:
    suites = _suites(args.suite)
    # every check before any run: a bad option costs nothing
    pollux = _pollux_checks(args) if "pollux" in suites else None
    openb = _openb_checks(args) if "openb" in suites else None
    result: dict = {}
    tables: dict = {}
    notes: list[str] = []
    if pollux is not None:
        _pollux_part(args, *pollux, result, tables, notes)
    if openb is not None:
        _openb_part(args, openb, result, tables, notes)
    emit(result, as_json=args.json, tables=tables, notes=notes)
    return 0


def _suites(text: str) -> list[str]:
    names = [x.strip() for x in str(text).split(",") if x.strip()]
    bad = [x for x in names if x not in SUITES]
    if bad or not names:
        raise ConfigError(f"--suite: unknown {', '.join(bad) or '(none given)'}; known: "
                          f"{', '.join(SUITES)}")
    return names


def _pollux_checks(args):
    data = find_data_dir(args.data)
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
    return data, engines, loads, workloads


def _pollux_part(args, data, engines, loads, workloads, result, tables, notes) -> None:
    """The Pollux workloads: fills `result`, `tables` and `notes` as this bench always has."""
    from ..policies import available

    have = set(available())
    rows, skipped = [], [e for e in engines if e not in have]
    for engine in [e for e in engines if e in have]:
        kinds = ["project"] if args.lengths != "both" else ["project", "artifact"]
        if args.lengths == "artifact" or engine == "pollux":
            kinds = ["artifact"]  # pollux: always the artifact's progress units (pollux_job)
        for load in loads:
            for n in workloads:
                for lengths in kinds:
                    rows.append(run_one(data, engine, load, n, lengths, args.rounds,
                                        args.throughput))
    summary = _summary(rows)
    notes += [("reference: Pollux OSDI'21 artifact (petuum/adaptdl osdi21-artifact c793c70),"
               " simulator/results-jobload/<engine>-<load>/summary.json; 16 x 4 GPUs, 60 s"
               " rounds"),
              ("lengths: artifact = the loader's default, the artifact simulator's own"
               " (statistical-efficiency progress, `perf.goodput.artifact_iterations`);"
               " project = the validation table's iterations (`lengths=\"project\"`)"),
              (f"throughput: {args.throughput} (artifact = step times looked up as the artifact"
               " does, `perf/artifact.py`; project = the project's model, `perf/model.py`)")]
    if skipped:
        notes.append(f"not run (no such engine here): {', '.join(skipped)}")
    result.update({"data": str(data), "results": rows, "summary": summary, "skipped": skipped})
    tables["Average JCT (s): ours beside the Pollux artifact's"] = [
        {k: _round(v) for k, v in r.items() if k not in ("completed",)} for r in rows]
    tables["Per engine, load and job lengths"] = summary


def _openb_checks(args):
    """(nodes path, [(trace, pod-list path)], plugins, protocols, seeds), checked."""
    from ..placement.plugins import PLACEMENT_PLUGINS
    from ..placement.replay import check_protocol
    from ..traces.openb import NODE_FILE, find_data_dir as find_openb, resolve_pod_list

    if args.seeds < 1:
        raise ConfigError("--seeds must be at least 1")
    plugins = [x.strip() for x in args.plugins.split(",") if x.strip()]
    bad = [x for x in plugins if x not in PLACEMENT_PLUGINS]
    if bad or not plugins:
        raise ConfigError(f"--plugins: unknown {', '.join(bad) or '(none given)'}; known: "
                          f"{', '.join(PLACEMENT_PLUGINS)}")
    protocols = [check_protocol(x.strip()) for x in args.protocols.split(",") if x.strip()]
    if not protocols:
        raise ConfigError("--protocols: name at least one of default, artifact")
    traces = [x.strip() for x in args.traces.split(",") if x.strip()]
    if not traces:
        raise ConfigError("--traces: name at least one openb pod list")
    folder = Path(args.openb_data) if args.openb_data else find_openb()
    if folder is None or not folder.is_dir():
        raise InputError("openb data not found: pass --openb-data DIR (the openb CSVs of"
                         " alibaba/clusterdata cluster-trace-gpu-v2023), or --suite pollux",
                         file=str(args.openb_data or "../shared/data/openb"))
    pods = [(t, resolve_pod_list(t, folder)) for t in traces]
    nodes = folder / NODE_FILE
    if not nodes.is_file():
        raise InputError("no GPU node list", file=str(nodes))
    return nodes, pods, plugins, protocols, range(args.seeds)


def run_openb(nodes_path: Path, pod_lists, plugins, protocols, seeds, progress=None) -> list[dict]:
    """Every pod list x protocol x plugin over `seeds`, replayed as `workbench openb` does (FGD's
    target workload: every shape under the default protocol, the artifact's 95% under its own);
    one row per (trace, load, protocol, plugin) beside the FGD artifact's figure."""
    from ..placement import replay
    from ..traces.openb import load_openb_nodes, load_openb_pods

    nodes = load_openb_nodes(nodes_path)
    rows = []
    for trace, path in pod_lists:
        pods = load_openb_pods(path)
        for protocol in protocols:
            coverage = replay.ARTIFACT_COVERAGE if protocol == "artifact" else 1.0
            workload = replay.prepare_workload(pods, trace, coverage)
            t0 = time.perf_counter()
            replays = replay.run(nodes, workload, plugins, seeds, load=OPENB_LOADS[-1],
                                 protocol=protocol)
            wall = time.perf_counter() - t0
            if progress:
                progress(f"openb {trace} {protocol}: {len(replays)} runs, {wall:.1f} s")
            for mean in replay.mean_rows(replays, OPENB_LOADS):
                rows += [_openb_row(trace, protocol, mean, load) for load in OPENB_LOADS]
    traces = {t: i for i, (t, _) in enumerate(pod_lists)}
    loads = {_pct(load): i for i, load in enumerate(OPENB_LOADS)}
    rows.sort(key=lambda r: (traces[r["trace"]], loads[r["load"]],
                             list(protocols).index(r["protocol"])))
    return rows


def _openb_row(trace: str, protocol: str, mean: dict, load: float) -> dict:
    key = f"alloc@{_pct(load)}"
    ours, sd = 100 * mean[key], 100 * mean[key + " sd"]
    ref = OPENB_REFERENCE.get(trace, {}).get(mean["plugin"])
    ref_mean, ref_sd = ref[OPENB_LOADS.index(load)] if ref else (None, None)
    return {"trace": trace, "load": _pct(load), "protocol": protocol, "plugin": mean["plugin"],
            "seeds": mean["seeds"], "ours_pct": ours, "ours_sd": sd,
            "reference_pct": ref_mean, "reference_sd": ref_sd,
            "diff_pts": None if ref_mean is None else ours - ref_mean,
            "s_per_run": mean["seconds"]}


def _pct(load: float) -> str:
    return f"{round(load * 100)}%"


def openb_summary(rows: list[dict]) -> list[dict]:
    """Per trace, load and protocol: the plugins best first, ours and the reference's, and how
    far the six figures are from the reference."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["trace"], r["load"], r["protocol"]), []).append(r)
    out = []
    for (trace, load, protocol), rs in groups.items():
        diffs = [r["diff_pts"] for r in rs if r["diff_pts"] is not None]
        known = [r for r in rs if r["reference_pct"] is not None]
        out.append({
            "trace": trace, "load": load, "protocol": protocol,
            "order_ours": _order(rs, "ours_pct"),
            "order_reference": _order(known, "reference_pct") if known else None,
            "mean_abs_diff_pts": sum(map(abs, diffs)) / len(diffs) if diffs else None,
            "max_abs_diff_pts": max(map(abs, diffs)) if diffs else None,
            "s_per_run": sum(r["s_per_run"] for r in rs) / len(rs)})
    return out


def _order(rows: list[dict], key: str) -> str:
    letters = {"fgd": "F", "best-fit": "B", "gpu-packing": "P", "gpu-clustering": "C",
               "dot-product": "D", "random": "R"}
    best = sorted(rows, key=lambda r: -r[key])
    return " > ".join(letters.get(r["plugin"], r["plugin"]) for r in best)


def _openb_part(args, checked, result, tables, notes) -> None:
    """The openb suite: fills `result["openb"]`, its two tables and its notes."""
    import sys

    nodes, pods, plugins, protocols, seeds = checked

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    rows = run_openb(nodes, pods, plugins, protocols, seeds, progress)
    summary = openb_summary(rows)
    missing = sorted({r["trace"] for r in rows if r["reference_pct"] is None})
    result["openb"] = {"nodes": str(nodes), "pod_lists": {t: str(p) for t, p in pods},
                       "seeds": list(seeds), "results": rows, "summary": summary,
                       "no_reference": missing}
    tables["openb: allocated GPU share (%), ours beside the FGD artifact's"] = [
        {k: _round2(v) for k, v in r.items()} for r in rows]
    tables["openb: per trace, load and protocol"] = [
        {k: _round2(v) for k, v in r.items()} for r in summary]
    notes += [("openb reference: FGD artifact (hkust-adsl/kubernetes-scheduler-simulator"
               " 1853fc0), experiments/analysis/expected_results/analysis_allo_discrete.csv,"
               " mean ± sd of its seeds 42-51; ours: seeds "
               f"{seeds.start}-{seeds.stop - 1}; diff = ours - reference, points;"
               " s_per_run = placement seconds per replay"),
              "order: F fgd, B best-fit, P gpu-packing, C gpu-clustering, D dot-product, R random"]
    if missing:
        notes.append(f"no reference figure in the bench for {', '.join(missing)}: printed '-'")


def _round2(v):
    return round(v, 2) if isinstance(v, float) else v


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
                                         " the Pollux artifact's figures; the placement plugins"
                                         " on openb beside the FGD artifact's")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--loads", default=",".join(LOADS))
    p.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    p.add_argument("--lengths", default="both", choices=("project", "artifact", "both"),
                   help="job lengths: the artifact simulator's (the loader's default), the"
                        " project's, or both")
    p.add_argument("--rounds", default="artifact", choices=ROUNDS,
                   help="the 60 s grid of rounds from the first arrival (ours) or from t = 0"
                        " (the artifact's)")
    p.add_argument("--throughput", default="artifact", choices=THROUGHPUTS,
                   help="step times: looked up as the artifact does (default) or the project's"
                        " model (every rotation of a placement averaged, log batch)")
    p.add_argument("--data", default=None,
                   help="folder with workloads*/ and profiles/ (default ../shared/data/pollux)")
    p.add_argument("--suite", default=",".join(SUITES),
                   help="which parts to run, comma-separated: pollux (the Pollux workloads),"
                        " openb (the placement plugins on openb); default both")
    p.add_argument("--seeds", type=int, default=10,
                   help="openb: seeds per trace, protocol and plugin (default 10: 0-9)")
    p.add_argument("--traces", default=",".join(OPENB_TRACES),
                   help="openb: pod lists (default default,gpushare40,multigpu50,cpu200)")
    p.add_argument("--plugins", default=",".join(ARTIFACT_POLICY),
                   help="openb: placement plugins (default all six)")
    p.add_argument("--protocols", default="default,artifact",
                   help="openb: replay protocols (default both: default,artifact)")
    p.add_argument("--openb-data", default=None,
                   help="openb: folder of the openb CSVs (default ../shared/data/openb)")
    p.add_argument("--quiet", action="store_true", help="openb: no progress lines on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
