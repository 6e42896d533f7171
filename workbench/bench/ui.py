"""`workbench bench ui`: server-side time per app update at 100 and 1,000 nodes.

One update is what each periodic tick costs the server after the simulator has moved:
the store's refresh (observe, cluster cells, forecasts, jobs table, engine view), every view
redrawing into its Bokeh document, and serialising the resulting document patch as the
server would send it. The simulation step itself is timed apart (it is the scheduler's cost,
not the UI's). The cluster is kept busy by a synthetic workload scaled to its size. Ratios
are against the 100-node anchor measured in the same run; the target is <= 100 ms at 1,000.
Above 64 nodes the Cluster tab opens on its overview heatmap; `drilled_ms` is the same
update with a job selected and its rack drilled down to (the per-GPU grid of 40 nodes).
"""

from __future__ import annotations

import statistics
import time

from .. import argtypes, output

TARGET_MS = 100.0


def register(subparsers) -> None:
    p = subparsers.add_parser("ui", help="server time per app update at 100 and 1,000 nodes")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--nodes", default="100,1000", help="cluster sizes (comma-separated; first"
                   " is the anchor)")
    p.add_argument("--updates", type=int, default=20, help="updates measured per size")
    p.add_argument("--seed", type=argtypes.seed, default=0)
    p.set_defaults(func=run)


def _workbench(nodes: int, seed: int):
    from ..clusters import make_cluster
    from ..traces import synthetic_workload
    from ..ui.app import Workbench
    from ..ui.state import WorkbenchState

    cluster = make_cluster(nodes, gpus_per_node=8, cpus=64, mem=512, gpu_model="V100",
                           nodes_per_rack=40)
    # Enough arrivals to keep every size about as busy: ~1 job per node per 10 min.
    jobs = synthetic_workload(n_jobs=4 * nodes, arrival_rate=nodes / 600.0, max_workers=16,
                              seed=seed, gpus_per_node=8)
    state = WorkbenchState.from_workload(jobs=jobs, nodes=cluster, policy="tiresias",
                                         trace="synthetic", cluster=f"{nodes}x8", speed=600.0)
    return Workbench(state=state, inline=False)


def measure(nodes: int, updates: int, seed: int = 0) -> dict:
    from bokeh.document import Document
    from bokeh.protocol import Protocol

    wb = _workbench(nodes, seed)
    doc = Document()
    doc.add_root(wb.layout.get_root(doc))
    events: list = []
    doc.on_change(lambda event: events.append(event))
    protocol = Protocol()
    state = wb.state
    step = state.speed * state.period_ms / 1000.0
    # Warm up until the cluster is busy (or an hour of simulated time has passed).
    for _ in range(120):
        state.controller.run(until=state.backend.now + step, max_rounds=2000)
        state.refresh()
        wb.sync()
        s = state.summary
        if s["gpus_used"] >= 0.6 * s["gpus_total"] and state.now > 1800:
            break
    events.clear()

    def serialise() -> int:
        if not events:
            return 0
        msg = protocol.create("PATCH-DOC", list(events))
        events.clear()
        return len(msg.content_json) + sum(len(b.to_bytes()) for b in msg.buffers)

    ui, ui_all, refresh, views, ser, sim, sent, size = [], [], [], [], [], [], [], []
    drilled: list[float] = []
    for k in range(3 * updates):
        # in turn: the default (Cluster tab), every view redrawn, a job selected and drilled
        every_view, drill = k % 3 == 1, k % 3 == 2
        if k % 3 == 0:
            wb.cluster.select("")
        elif drill:
            wb.cluster.select(_busiest_job(state))
            serialise()
        t0 = time.perf_counter()
        state.controller.run(until=state.backend.now + step, max_rounds=2000)
        t1 = time.perf_counter()
        state.refresh()
        t2 = time.perf_counter()
        wb.sync(all_views=every_view)
        t3 = time.perf_counter()
        nbytes = serialise()
        t4 = time.perf_counter()
        sim.append(t1 - t0)
        if every_view or drill:
            (ui_all if every_view else drilled).append(t4 - t1)
            continue
        refresh.append(t2 - t1)
        views.append(t3 - t2)
        ser.append(t4 - t3)
        ui.append(t4 - t1)
        sent.append(wb.cluster.cells_sent)
        size.append(nbytes)
    s = state.summary

    def ms(xs: list[float]) -> float:
        return 1000 * statistics.median(xs)

    return {"nodes": nodes, "gpus": int(s["gpus_total"]), "jobs_listed": len(state.jobs),
            "gpus_used": s["gpus_used"], "ui_ms": ms(ui),
            "ui_p90_ms": 1000 * sorted(ui)[int(0.9 * (len(ui) - 1))],
            "refresh_ms": ms(refresh), "views_ms": ms(views), "serialise_ms": ms(ser),
            "all_views_ms": ms(ui_all), "drilled_ms": ms(drilled),
            "forecast_ms": 1000 * state.forecast_seconds,
            "sim_ms": ms(sim), "cells_sent": int(statistics.median(sent)),
            "patch_kib": statistics.median(size) / 1024}


def _busiest_job(state) -> str:
    """The running job holding the most GPUs (the one an operator would look up)."""
    placed = list(state.cluster_state.iter_placed())
    return max(placed, key=lambda j: (j.num_workers, j.name)).name if placed else ""


def run(args) -> int:
    from ..errors import ConfigError

    try:
        sizes = [int(x) for x in args.nodes.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--nodes: expected comma-separated integers, got {args.nodes!r}") from None
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"--nodes: expected positive sizes, got {args.nodes!r}")
    if args.updates < 1:
        raise ConfigError(f"--updates: expected >= 1, got {args.updates}")
    rows = [measure(n, args.updates, args.seed) for n in sizes]
    anchor = rows[0]["ui_ms"]
    for r in rows:
        r["ratio"] = r["ui_ms"] / anchor if anchor > 0 else float("nan")
        r["within_target"] = r["ui_ms"] <= TARGET_MS
    result = {"target_ms": TARGET_MS, "anchor_nodes": sizes[0], "updates": args.updates,
              "results": rows}
    notes = [(f"ui_ms: store refresh + redraw of the controls and the visible tab (Cluster, the"
             f" default) + patch serialisation, median of {args.updates}; ratio against"
             f" {sizes[0]} nodes; target <= {TARGET_MS:g} ms at 1,000 nodes."),
             ("all_views_ms: the same with every tab redrawn (jobs table and forecasts included;"
             " forecasts recomputed every few updates when slow, forecast_ms is one)."),
             ("drilled_ms: the default update with the busiest job selected, its rack drilled"
              " down to (above 64 nodes; on smaller clusters its GPUs outlined)."),
             "sim_ms: the scheduler and simulator advancing one tick (not the UI's cost)."]
    output.emit(result, as_json=args.json, tables={"server time per app update": rows},
                notes=notes)
    return 0
