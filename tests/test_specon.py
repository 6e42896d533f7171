"""SpeCon: slow-growth detection, contention, and migrations that respect capacity."""

from __future__ import annotations

import numpy as np

from workbench.clusters import make_cluster
from workbench.model import CPU, JobSpec, Migrate, Place, Resources, Suspend
from workbench.policies import make_policy
from workbench.policies.specon import relative_growth
from workbench.sim import SimBackend
from workbench.sim.engine import cpu_share_factors

G1 = Resources(cpu=4, mem=16, gpu=1)


def saturating_curve(epochs: int, per_epoch: float = 100.0) -> list[tuple[float, float, float]]:
    """Accuracy 1 - 0.9 * exp(-epoch / 8), one history point per epoch."""
    return [(60.0 * e, e * per_epoch, 1 - 0.9 * np.exp(-e / 8)) for e in range(epochs + 1)]


def test_slow_growth_detected_on_a_constructed_curve():
    h = saturating_curve(60)
    window = 10 * 100.0  # 10 epochs of 100 iterations
    early = relative_growth(h[:21], window, increases=True)
    late = relative_growth(h, window, increases=True)
    assert early > 0.1  # epochs 10 -> 20: still climbing fast
    assert late < 0.1  # epochs 50 -> 60: flat
    assert relative_growth(h[:5], window, increases=True) is None  # not enough history
    loss = [(t, i, 2.0 - m) for t, i, m in h]  # a falling loss grows the same way
    assert relative_growth(loss[:21], window, increases=False) > 0.1


def test_policy_judges_growth_per_interval_and_not_before_two_intervals():
    policy = make_policy("specon", alpha=0.1, interval=10)
    spec = JobSpec("j", "cifar10", 0.0, 1e6, 512, 1, 1, 1)
    from workbench.model import JobStatus

    job = JobStatus(spec=spec)
    per_epoch = policy.perf.epoch_iterations("cifar10", 512)
    job.history = [(t, i / 100 * per_epoch, m) for t, i, m in saturating_curve(15)]
    assert policy.job_growth(job) is None  # 15 epochs < two intervals
    job.history = [(t, i / 100 * per_epoch, m) for t, i, m in saturating_curve(60)]
    assert policy.job_growth(job) < 0.1


def test_contention_shares_cores_in_proportion_to_requests():
    # Two jobs wanting 32 cores each on 48: both get 75 %.
    assert cpu_share_factors(48, {"a": 32, "b": 32}, {"a": 8, "b": 8}) == {"a": 0.75, "b": 0.75}
    # A task that wants only what it requests is never slowed; the burster takes the rest.
    f = cpu_share_factors(48, {"a": 64, "b": 16}, {"a": 16, "b": 16})
    assert f == {"a": 0.5, "b": 1.0}
    assert cpu_share_factors(48, {"a": 20, "b": 20}, {"a": 4, "b": 4}) == {"a": 1.0, "b": 1.0}


def test_contention_slows_colocated_jobs_in_the_simulator():
    nodes = make_cluster(2, 4, 16, 64)
    a = JobSpec("a", "cifar10", 0.0, 1e6, 512, 2, 1, 2, worker_demand=G1, cpu_burst=3.0)
    b = JobSpec("b", "cifar10", 0.0, 1e6, 512, 2, 1, 2, worker_demand=G1, cpu_burst=3.0)
    alone = SimBackend(nodes, [a], contention=True)
    alone.advance(0.0)
    alone.apply([Place("a", "t", {"node-00": 2})])
    alone.advance(100.0)
    together = SimBackend(nodes, [a, b], contention=True)
    together.advance(0.0)
    together.apply([Place("a", "t", {"node-00": 2}), Place("b", "t", {"node-00": 2})])
    together.advance(100.0)
    ra, rb = alone.jobs["a"].throughput, together.jobs["a"].throughput
    # Alone it wants 24 of 16 cores (2/3 speed); together 48 of 16 (1/3 speed).
    assert abs(rb / ra - 0.5) < 1e-9
    assert together.jobs["b"].throughput == rb


def _contended(nodes, extra_node_full: bool):
    """`slow` (flat curve) and `fast` share node-00 and want 48 of its 32 cores."""
    slow = JobSpec("slow", "cifar10", 0.0, 1e7, 512, 2, 1, 2, worker_demand=G1, cpu_burst=3.0)
    fast = JobSpec("fast", "cifar10", 0.0, 1e7, 512, 2, 1, 2, worker_demand=G1, cpu_burst=3.0)
    jobs = [slow, fast]
    places = [Place("slow", "t", {"node-00": 2}), Place("fast", "t", {"node-00": 2})]
    if extra_node_full:
        filler = JobSpec("filler", "cifar10", 0.0, 1e7, 512, 4, 1, 4, worker_demand=G1)
        jobs.append(filler)
        places.append(Place("filler", "t", {"node-01": 4}))
    backend = SimBackend(nodes, jobs, contention=True)
    backend.advance(0.0)
    backend.apply(places)
    backend.advance(120.0)
    state = backend.observe()
    policy = make_policy("specon")
    per_epoch = policy.perf.epoch_iterations("cifar10", 512)
    state.jobs["slow"].history = [(float(e), e * per_epoch, 0.9 + 1e-4 * e) for e in range(40)]
    return backend, state, policy


def test_migration_moves_a_slow_job_where_it_fits_and_cools_the_node():
    nodes = make_cluster(2, 4, 32, 128)
    backend, state, policy = _contended(nodes, extra_node_full=False)
    before = state.jobs["fast"].throughput
    actions = policy.schedule(state)
    moves = [a for a in actions if isinstance(a, Migrate)]
    assert [m.job for m in moves] == ["slow"]
    assert moves[0].workers == {"node-01": 2}
    assert "slow-growing" in moves[0].reason and "fast" in moves[0].reason
    outcomes = backend.apply(actions)
    assert all(o.applied for o in outcomes)
    assert (backend.allocated <= backend.capacity + 1e-9).all()
    backend.advance(200.0)
    after = backend.observe()
    assert after.jobs["fast"].throughput > before * 1.2  # the fast job got its cores back
    view = policy.engine_view()
    assert view["migrations"] == 1 and "slow" in view["slow_growing"]


def test_no_migration_when_no_node_has_room():
    nodes = make_cluster(2, 4, 32, 128)
    _backend, state, policy = _contended(nodes, extra_node_full=True)
    actions = policy.schedule(state)
    assert not [a for a in actions if isinstance(a, (Migrate, Suspend))]
    # With hold on, the slow job is paused instead, releasing the cores.
    policy = make_policy("specon", hold=True)
    per_epoch = policy.perf.epoch_iterations("cifar10", 512)
    state.jobs["slow"].history = [(float(e), e * per_epoch, 0.9 + 1e-4 * e) for e in range(40)]
    actions = policy.schedule(state)
    assert [a.job for a in actions if isinstance(a, Suspend)] == ["slow"]
    cpu_used = state.allocated[:, CPU]
    assert (cpu_used <= state.capacity[:, CPU]).all()
