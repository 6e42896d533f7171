"""The qos engine: deadline ordering, autoscaling within capacity, reasons, and its switches."""

from __future__ import annotations

import re

import numpy as np
import pytest

from workbench.bench.qos import cluster
from workbench.clusters import make_cluster
from workbench.experiment import run_policy
from workbench.model import JobSpec, Resources
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.traces.deadlines import deadline_workload


def _job(name, app="cifar10", arrival=0.0, workers=4, max_workers=4, deadline_factor=None,
         frac=0.3, demand=None, slack=0.0):
    perf = default_perf()
    bs = perf.measured_batch_sizes(app)[0]
    spec = JobSpec(name=name, application=app, arrival=arrival, batch_size=bs,
                   total_work=perf.total_iterations(app, bs) * frac, initial_workers=workers,
                   max_workers=max_workers, **({"worker_demand": demand} if demand else {}))
    if deadline_factor is not None:
        run = spec.total_work / perf.ideal_rate(spec, workers, 4)
        spec = spec.with_(deadline=arrival + slack + deadline_factor * run)
    return spec


def _hits(result) -> int:
    return sum(1 for j in result.backend.jobs.values()
               if j.finish_time is not None and j.spec.deadline is not None
               and j.state.value == "completed" and j.finish_time <= j.spec.deadline + 1e-9)


def _contention():
    """Two long jobs with loose deadlines ahead (by name) of four short ones with tight ones, all
    arriving together on one 4-GPU node: arrival order starts the long jobs first."""
    jobs = [_job(f"a-long-{i}", frac=0.6, deadline_factor=6.0, slack=120) for i in range(2)]
    jobs += [_job(f"b-short-{i}", frac=0.1, deadline_factor=1.5, slack=120) for i in range(4)]
    return jobs


def test_qos_meets_more_deadlines_than_fifo_under_contention():
    nodes = make_cluster(1, 4)
    jobs = _contention()
    fifo = run_policy(nodes, jobs, "fifo")
    qos = run_policy(nodes, jobs, "qos", policy_options={"autoscaling": False})
    assert fifo.metrics["completed"] == qos.metrics["completed"] == len(jobs)
    assert _hits(qos) > _hits(fifo)
    assert qos.metrics["deadline_hit_rate"] > fifo.metrics["deadline_hit_rate"]


def test_qos_beats_gang_fifo_on_a_trace_derived_workload():
    jobs = deadline_workload(0, share=0.25)
    nodes = cluster(4)
    fifo = run_policy(nodes, jobs, "fifo", policy_options={"backfill": True})
    qos = run_policy(nodes, jobs, "qos")
    assert qos.metrics["deadline_hit_rate"] > fifo.metrics["deadline_hit_rate"]


def _decisions(result, kind=None):
    return [d for d in result.controller.recorder.decisions if kind is None or d.action == kind]


def test_autoscaling_never_over_allocates_and_every_decision_has_a_reason():
    jobs = deadline_workload(1, share=0.25)
    nodes = cluster(4)
    r = run_policy(nodes, jobs, "qos")
    decisions = _decisions(r)
    assert any(d.action == "Scale" for d in decisions)
    # The simulator refuses anything that does not fit: nothing was refused.
    refused = [d for d in decisions if not d.applied]
    assert not refused, refused[:3]
    total_gpus = sum(n.gpus for n in nodes)
    assert all(s.gpus_allocated <= s.gpus_total + 1e-9 <= total_gpus + 1e-9
               for s in r.controller.recorder.timeline)
    for d in decisions:
        assert d.reason.strip(), d
    for d in _decisions(r, "Scale"):
        m = re.match(r"scaled (\d+)→(\d+) workers: (.+)", d.reason)
        assert m, d.reason
        spec = r.backend.jobs[d.job].spec
        assert spec.min_workers <= int(m.group(2)) <= spec.max_workers
        assert int(m.group(1)) != int(m.group(2))
    for j in r.backend.jobs.values():
        assert j.state.value == "completed"


def test_ahead_job_scaled_down_for_a_newcomer_and_says_for_whom():
    # `big` runs alone with 4 workers and a loose deadline; `urgent` arrives later with a tight
    # deadline; only shrinking `big` lets it start in time.
    big = _job("big", workers=4, max_workers=4, frac=1.0, deadline_factor=10.0)
    urgent = _job("urgent", arrival=900.0, workers=2, max_workers=2, frac=0.1,
                  deadline_factor=1.3, slack=120)
    nodes = make_cluster(1, 4)
    auto = run_policy(nodes, [big, urgent], "qos", policy_options={"use_idle": False})
    fixed = run_policy(nodes, [big, urgent], "qos", policy_options={"autoscaling": False})
    shrink = [d for d in _decisions(auto, "Scale") if d.job == "big"]
    assert shrink and "ahead of deadline by" in shrink[0].reason
    assert "for urgent" in shrink[0].reason
    assert _hits(auto) == 2
    assert _hits(fixed) < 2  # without autoscaling `urgent` waits for `big`
    assert not _decisions(fixed, "Scale")


def _resized(result) -> int:
    """Scale actions plus jobs started at other than their submitted size."""
    n = len(_decisions(result, "Scale"))
    for d in _decisions(result, "Place"):
        placed = sum(int(c) for c in re.findall(r"×(\d+)(?![\dp])", d.detail))
        n += placed != result.backend.jobs[d.job].spec.initial_workers
    return n


def test_switches_change_behaviour():
    jobs = deadline_workload(2, share=0.25)
    nodes = cluster(4)
    runs = {k: run_policy(nodes, jobs, "qos", policy_options=o) for k, o in {
        "both": {}, "sched": {"autoscaling": False}, "auto": {"scheduling": False},
        "neither": {"scheduling": False, "autoscaling": False}}.items()}
    # Without autoscaling every job runs at its submitted size and is never rescaled.
    for key in ("sched", "neither"):
        assert _resized(runs[key]) == 0
    assert _resized(runs["both"]) > 0 and _resized(runs["auto"]) > 0
    # Without scheduling: arrival order, no preemption of best-effort jobs.
    for key in ("auto", "neither"):
        assert not _decisions(runs[key], "Suspend")
        assert all("arrival order" in d.reason for d in _decisions(runs[key], "Place")
                   if "deadline out of reach" not in d.reason)
    starts = {k: [d.job for d in _decisions(r, "Place")] for k, r in runs.items()}
    assert starts["sched"] != starts["neither"]
    assert starts["both"] != starts["sched"]


def test_engine_view_has_forecasts_classes_and_scalings():
    jobs = deadline_workload(3, share=0.2)
    nodes = cluster(4)
    policy = make_policy("qos")
    r = run_policy(nodes, jobs, policy)
    view = policy.engine_view()
    assert view["engine"] == "qos" and view["options"] == {"scheduling": True, "autoscaling": True}
    assert isinstance(view["scaling"], list)
    assert all({"time", "job", "from", "to", "reason"} <= set(e) for e in view["scaling"])
    # Mid-run: the view describes the active jobs.
    from workbench.control import Controller
    from workbench.sim import SimBackend

    policy = make_policy("qos")
    backend = SimBackend(nodes, jobs)
    ctl = Controller(backend, policy)
    ctl.run(until=2 * 3600)
    view = policy.engine_view()
    assert view["jobs"]
    for d in view["jobs"].values():
        assert d["class"] in ("on-track", "at-risk", "late", "heavy", "no-deadline")
        assert d["low"] <= d["finish"] <= d["high"]
        assert d["p_meet_deadline"] is None or 0.0 <= d["p_meet_deadline"] <= 1.0
    assert r.metrics["completed"] == len(jobs)


def test_cpu_only_jobs_are_scheduled_and_reasons_count_cpus():
    jobs = deadline_workload(0, share=0.15, cpu=True)
    assert all(j.worker_demand.gpu == 0 for j in jobs)
    nodes = cluster(3, cpu=True)
    r = run_policy(nodes, jobs, "qos")
    assert r.metrics["completed"] + r.metrics["rejected"] == len(jobs)
    assert r.metrics["deadline_hit_rate"] > 0
    texts = " ".join(d.reason for d in _decisions(r))
    assert "GPU" not in texts.replace("GPUs", "")  # units follow the demand
    assert "CPUs" in texts or "worker slots" in texts


def test_bad_option_is_a_clear_error():
    with pytest.raises(ValueError, match="sizing"):
        make_policy("qos", sizing="most")
    assert np.isfinite(_job("x", deadline_factor=2.0).deadline)
    assert Resources(cpu=4).gpu == 0


# ---- dqoes ---------------------------------------------------------------------------------


def test_dqoes_satisfies_more_models_than_kube_default_and_counts_them():
    from workbench.bench.dqoes import satisfied
    from workbench.traces.deadlines import qoe_workload

    jobs = qoe_workload(0, share=0.25)
    assert all(j.target_metric is not None and j.deadline is not None for j in jobs)
    nodes = cluster(4)
    base = run_policy(nodes, jobs, "kube-default")
    policy = make_policy("dqoes")
    r = run_policy(nodes, jobs, policy)
    assert satisfied(r) > satisfied(base)
    view = policy.engine_view()
    assert view["engine"] == "dqoes"
    assert view["qoe"]["satisfied"] == satisfied(r)
    assert view["qoe"]["satisfied"] + view["qoe"]["missed"] == len(jobs)
    # Every start names the job's QoE target; unreachable targets get a minimal share.
    for d in _decisions(r, "Place"):
        assert "QoE target" in d.reason or "unreachable" in d.reason
        if "QoE target unreachable" in d.reason:
            placed = sum(int(c) for c in re.findall(r"×(\d+)(?![\dp])", d.detail))
            assert placed == r.backend.jobs[d.job].spec.min_workers


def test_dqoes_view_mid_run_has_targets_and_predictions():
    from workbench.control import Controller
    from workbench.sim import SimBackend
    from workbench.traces.deadlines import qoe_workload

    jobs = qoe_workload(1, share=0.2)
    policy = make_policy("dqoes")
    backend = SimBackend(cluster(4), jobs)
    Controller(backend, policy).run(until=3 * 3600)
    view = policy.engine_view()
    assert view["jobs"]
    for d in view["jobs"].values():
        assert d["target_metric"] is not None
        assert d["qoe_class"] in ("over-satisfied or on track", "under-satisfied", "unreachable")
        assert d["time_to_target"] >= 0
