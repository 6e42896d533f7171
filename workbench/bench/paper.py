"""`workbench bench paper`: every seed engine in its own paper's setting (`workbench scenarios`),
against the baselines its paper's claims name, over several seeds; per claim the paper's
figure beside ours.

Per claim it prints: the paper's gain (its figure, cited by the scenario), ours (the mean gain
over the seeds, min-max and a 95 % t-interval), in how many seeds the gain points the paper's
way, whether the mean does ("direction"), our mean over the paper's figure ("ratio") and
whether that is at least one half ("≥ half", the issue's bar). A claim whose paper gives no
figure (NaN) is checked for direction only: a gain above zero. A gain is positive when the
paper's engine is better (`scenarios.Claim.gain`).

Work: one task per scenario and seed runs every label that scenario's claims name (the
paper's engine, or the part of it a claim is about, and each baseline) and computes every
claim's gain there. Tasks, not single runs, go to the process pool (`--workers`, default all
cores; 1 runs here): a claim's `measure` may read both runs whole (every job), and only
numbers come back. Each run is seeded, and the rows are put in scenario and seed order
whatever order the tasks finish in, so the output does not depend on the pool.

The realistic-trace benches (`workbench bench specon|dragon|dl2|qos|oasis|dqoes`) stay; this
one prints where their measured results are (they take minutes each, so it does not run them).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import signal
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import numpy as np

from .. import argtypes
from ..errors import ConfigError
from ..output import emit

# The benches on realistic traces, and where their measured results are written up.
REALISTIC = (
    ("specon", "docs/specon-dragon-results.md"), ("dragon", "docs/specon-dragon-results.md"),
    ("dl2", "docs/oasis-dl2-results.md"), ("qos", "docs/qos-results.md"),
    ("oasis", "docs/oasis-dl2-results.md"), ("dqoes", "docs/qos-results.md"),
)


def labels_needed(scenario) -> list[str]:
    """The runs `scenario`'s claims compare, in the order of its `engines`."""
    wanted = {scenario.claim_engine(c) for c in scenario.claims}
    wanted |= {c.baseline for c in scenario.claims}
    missing = wanted - set(scenario.engines)
    if missing:
        raise ConfigError(f"scenario {scenario.name}: its claims name runs it does not define:"
                          f" {', '.join(sorted(missing))}")
    return [label for label in scenario.engines if label in wanted]


def _metric(run, key: str) -> float | None:
    value = run.metrics.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def measure_seed(scenario, seed: int) -> dict[str, Any]:
    """Run the labels `scenario`'s claims need on `seed`; every claim's gain and, where the
    claim names a metric both runs report, both values."""
    from ..scenarios import run_scenario

    started = time.perf_counter()
    runs = {label: run_scenario(scenario, label, seed) for label in labels_needed(scenario)}
    claims = []
    for claim in scenario.claims:
        ours, theirs = runs[scenario.claim_engine(claim)], runs[claim.baseline]
        claims.append({"gain_pct": float(claim.gain(ours, theirs)),
                       "ours": _metric(ours, claim.metric),
                       "theirs": _metric(theirs, claim.metric)})
    return {"scenario": scenario.name, "seed": seed, "claims": claims,
            "wall_s": time.perf_counter() - started}


def _task(scenario, seed: int) -> dict[str, Any]:
    """A task: `scenario` is a `Scenario` or a registered one's name (what a pool worker is
    sent). A run that fails gives a row with its error instead of ending the bench: the other
    scenarios' claims are still measured, and the failure is printed beside its claims."""
    name = scenario if isinstance(scenario, str) else scenario.name
    started = time.perf_counter()
    try:
        if isinstance(scenario, str):
            from ..scenarios import get

            scenario = get(scenario)
        return measure_seed(scenario, seed)
    except Exception as e:  # noqa: BLE001 - reported per claim, see the docstring
        text = f"{type(e).__name__}: {e}".splitlines()[0]
        return {"scenario": name, "seed": seed, "error": text,
                "wall_s": time.perf_counter() - started}


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool, the workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def shippable(scenario) -> Any:
    """What a pool worker is sent for `scenario`: its name when it is registered, else the
    object if it pickles; None if neither (it then runs in this process)."""
    from ..scenarios import all_scenarios

    if all_scenarios().get(scenario.name) is scenario:
        return scenario.name
    try:
        pickle.dumps(scenario)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    return scenario


def run_tasks(tasks: Sequence[tuple[Any, int]], workers: int, log=None) -> list[dict]:
    """Every (scenario, seed) task's row, in the order of `tasks`."""
    rows: dict[int, dict] = {}
    pooled = [(i, shippable(s), seed) for i, (s, seed) in enumerate(tasks)] if workers > 1 \
        else []
    local = [i for i, ship, _ in pooled if ship is None] if pooled else list(range(len(tasks)))
    pooled = [p for p in pooled if p[1] is not None]
    done = 0

    def report(row: dict) -> None:
        nonlocal done
        done += 1
        if log is not None:
            how = f"failed: {row['error']}" if "error" in row else "done"
            log.write(f"bench paper: {row['scenario']} seed {row['seed']} {how}"
                      f" ({row['wall_s']:.0f} s; {done}/{len(tasks)})\n")
            log.flush()

    if pooled:
        with ProcessPoolExecutor(min(workers, len(pooled)), initializer=_ignore_sigint) as pool:
            futures = {pool.submit(_task, ship, seed): i for i, ship, seed in pooled}
            try:
                for future in as_completed(futures):
                    rows[futures[future]] = future.result()
                    report(rows[futures[future]])
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    for i in local:
        scenario, seed = tasks[i]
        rows[i] = _task(scenario, seed)
        report(rows[i])
    return [rows[i] for i in range(len(tasks))]


def _interval(values: np.ndarray) -> tuple[float, float]:
    """95 % t-interval of the mean (NaN for fewer than two values)."""
    if len(values) < 2:
        return float("nan"), float("nan")
    from scipy import stats

    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return float(values.mean()) - half, float(values.mean()) + half


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(kept)) if kept else None


def summarise(scenario, rows: Sequence[dict]) -> list[dict[str, Any]]:
    """One row per claim of `scenario` over its seeds' `rows` (from `_task`); seeds whose
    runs failed are left out and counted (`failed_seeds`, `error`)."""
    failed = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    out = []
    for k, claim in enumerate(scenario.claims):
        gains = np.array([r["claims"][k]["gain_pct"] for r in rows], dtype=float)
        finite = gains[np.isfinite(gains)]
        paper = float(claim.paper_gain_pct)
        has_figure = math.isfinite(paper) and paper != 0
        sign = math.copysign(1.0, paper) if has_figure else 1.0
        mean = float(finite.mean()) if len(finite) else float("nan")
        lo, hi = _interval(finite)
        ratio = mean / paper if has_figure and math.isfinite(mean) else None
        out.append({
            "scenario": scenario.name, "claim": claim.label, "engine": scenario.claim_engine(claim),
            "baseline": claim.baseline, "metric": claim.metric, "source": claim.source,
            "paper_pct": paper if math.isfinite(paper) else None,
            "ours_pct": mean, "min_pct": float(finite.min()) if len(finite) else None,
            "max_pct": float(finite.max()) if len(finite) else None,
            "ci95_low": lo, "ci95_high": hi, "seeds": len(gains),
            "seeds_with_direction": int(np.sum(gains * sign > 0)),
            "direction": bool(math.isfinite(mean) and mean * sign > 0) if rows else None,
            "ratio": ratio, "half_reached": None if ratio is None else bool(ratio >= 0.5),
            "ours_metric": _mean([r["claims"][k]["ours"] for r in rows]),
            "baseline_metric": _mean([r["claims"][k]["theirs"] for r in rows]),
            "failed_seeds": len(failed), "error": failed[0]["error"] if failed else None,
        })
    return out


def run_bench(scenarios: Sequence, seeds: int | None = None, workers: int = 1,
              log=None) -> dict[str, Any]:
    """Measure every claim of `scenarios` over `seeds` seeds each (0..seeds-1; default each
    scenario's own `seeds`)."""
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds: expected a positive integer, got {seeds}")
    if workers < 1:
        raise ConfigError(f"--workers: expected a positive integer, got {workers}")
    for scenario in scenarios:
        labels_needed(scenario)  # a claim naming a run the scenario lacks: fail before any work
    started = time.perf_counter()
    tasks = [(s, seed) for s in scenarios for seed in range(seeds or s.seeds)]
    rows = run_tasks(tasks, workers, log)
    claims, per_seed = [], []
    for scenario in scenarios:
        mine = [r for r in rows if r["scenario"] == scenario.name]
        claims += summarise(scenario, mine)
        for r in mine:
            for k, claim in enumerate(scenario.claims):
                got = r["claims"][k] if "error" not in r else {"error": r["error"]}
                per_seed.append({"scenario": scenario.name, "seed": r["seed"],
                                 "claim": claim.label, **got})
    return {"bench": "paper", "scenarios": [{"name": s.name, "paper": s.paper, "notes": s.notes,
                                             "seeds": seeds or s.seeds} for s in scenarios],
            "claims": claims, "runs": per_seed, "workers": workers,
            "realistic_benches": [{"bench": f"workbench bench {b}", "results": d}
                                  for b, d in REALISTIC],
            "wall_s": time.perf_counter() - started}


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:+.1f}"


def table_rows(claims: Sequence[dict]) -> list[dict[str, Any]]:
    """The printed table: one line per claim, percentages as signed text."""
    out = []
    for c in claims:
        spread = "-" if c["min_pct"] is None else f"{_pct(c['min_pct'])}..{_pct(c['max_pct'])}"
        ci = "-" if not math.isfinite(c["ci95_low"]) else \
            f"{_pct(c['ci95_low'])}..{_pct(c['ci95_high'])}"
        out.append({
            "scenario": c["scenario"], "claim": c["claim"], "ours vs": f"{c['engine']} vs"
            f" {c['baseline']}", "paper %": "not stated" if c["paper_pct"] is None
            else _pct(c["paper_pct"]), "ours %": _pct(c["ours_pct"]), "min..max": spread,
            "95% CI": ci, "seeds right way": f"{c['seeds_with_direction']}/{c['seeds']}",
            "direction": "failed" if c["direction"] is None else (
                "yes" if c["direction"] else "no"),
            "ratio": "-" if c["ratio"] is None else f"{c['ratio']:.2f}",
            ">= half": "-" if c["half_reached"] is None else ("yes" if c["half_reached"]
                                                             else "no"),
        })
    return out


def scenario_rows(claims: Sequence[dict]) -> list[dict[str, Any]]:
    """Per scenario: how many of its claims point the paper's way, and reach half of it."""
    out: dict[str, dict[str, Any]] = {}
    for c in claims:
        row = out.setdefault(c["scenario"], {"scenario": c["scenario"], "claims": 0,
                                             "direction": 0, ">= half": 0, "no figure": 0,
                                             "failed": 0})
        row["claims"] += 1
        row["direction"] += bool(c["direction"])
        row[">= half"] += bool(c["half_reached"])
        row["no figure"] += c["paper_pct"] is None
        row["failed"] += c["direction"] is None
    return list(out.values())


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """`rows` as a Markdown table (for docs/paper-results.md), same cells as the text table."""
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    cells = [[str(r[c]).replace("|", "\\|") for c in cols] for r in rows]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def run(args: argparse.Namespace) -> int:
    from ..scenarios import all_scenarios, get

    names = args.scenario or list(all_scenarios())
    if not names:
        raise ConfigError("bench paper: no scenarios are defined (workbench/scenarios/)")
    scenarios = [get(name) for name in dict.fromkeys(names)]
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    result = run_bench(scenarios, args.seeds, workers, log=None if args.json else sys.stderr)
    seeds = ", ".join(f"{s['name']} {s['seeds']}" for s in result["scenarios"])
    notes = [f"gain: % by which the paper's engine beats the baseline (positive = better);"
             f" ratio = ours / paper; seeds (0..N-1) per scenario: {seeds};"
             f" wall {result['wall_s']:.0f} s, {workers} worker(s)"]
    notes += list(dict.fromkeys(  # one line per scenario whose runs failed
        f"{c['scenario']}: {c['failed_seeds']} seed(s) failed: {c['error']}"
        for c in result["claims"] if c["failed_seeds"]))
    notes += [f"{s['name']}: {s['notes']}" for s in result["scenarios"] if s["notes"]]
    notes.append("realistic-trace benches (not run here): " + "; ".join(
        f"{r['bench']} ({r['results']})" for r in result["realistic_benches"]))
    if args.markdown and not args.json:
        sys.stdout.write(markdown(table_rows(result["claims"])) + "\n\n"
                         + markdown(scenario_rows(result["claims"])) + "\n\n")
        sys.stdout.write("\n".join(notes) + "\n")
        return 0
    emit(result, as_json=args.json, notes=notes, tables={
        "paper claims in their own settings (workbench bench paper)": table_rows(result["claims"]),
        "per scenario: claims whose direction is reproduced, and which reach half the paper's"
        " figure": scenario_rows(result["claims"])})
    return 0


def register(sub) -> None:
    p = sub.add_parser("paper", help="every seed engine in its paper's own setting vs the paper's"
                       " baselines: the paper's figure beside ours, per claim")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="a scenario (repeatable; default all: see `workbench scenarios`)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per scenario (default: each scenario's own)")
    p.add_argument("--workers", type=argtypes.workers, default=None,
                   help="processes (default: all cores; 1 runs in this process)")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.set_defaults(func=run)


__all__ = ["labels_needed", "measure_seed", "register", "run_bench", "scenario_rows", "summarise",
           "table_rows"]
