"""OASiS: prices, admission, capacity, and the schedule subroutine on hand-checked cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workbench.clusters import make_cluster, preset
from workbench.control import Controller
from workbench.model import Admit, JobKind, JobSpec, Node, Place, Reject, Resources
from workbench.policies import make_policy
from workbench.policies.oasis import OasisPolicy, PriceBook, _fit, _path, sigmoid_utility
from workbench.sim import SimBackend
from workbench.traces.ps_jobs import philly_ps_workload

WORKER = Resources(cpu=1, mem=1, gpu=1)
PS = Resources(cpu=1, mem=1, gpu=0)
BOUNDS = (1.0, {"cpu": 1.0, "mem": 1.0, "gpu": 16.0})


class LinearPerf:
    """Every worker trains one iteration per second, whatever the PS count."""

    ps_models = ("toy",)

    def ps_speed(self, model, workers, ps, batch_per_worker=None):
        return float(workers) if workers > 0 and ps > 0 else 0.0

    def ideal_rate(self, spec, workers, gpus_per_node=4):
        return float(workers)

    def iteration_rate(self, spec, workers, ps):
        return self.ps_speed(spec.application, sum(workers.values()), sum(ps.values()))


def toy_job(work: float = 200.0, weight: int = 10, deadline: float = 10_000.0) -> JobSpec:
    return JobSpec(name="toy", application="toy", arrival=0.0, total_work=work, batch_size=1,
                   initial_workers=1, min_workers=1, max_workers=2, num_ps=1,
                   worker_demand=WORKER, ps_demand=PS, kind=JobKind.PS, priority=weight,
                   deadline=deadline)


def toy_policy(job: JobSpec, **kw) -> tuple[OasisPolicy, SimBackend]:
    nodes = [Node("a", 8, 32, 2), Node("b", 8, 32, 2)]
    options = {"perf": LinearPerf(), "round_interval": 100.0, "restart_delay": 0.0,
                   "workers_per_ps": 2, "work_levels": 2, "horizon_slots": 3, "bounds": BOUNDS}
    options.update(kw)
    policy = OasisPolicy(**options)
    backend = SimBackend(nodes, [job], perf=LinearPerf())
    backend.advance(0.0)
    policy._setup(backend.observe())
    return policy, backend


def test_prices_rise_with_utilisation_and_stay_within_bounds():
    book = PriceBook(np.array([[8.0, 32.0, 4.0]]))
    book.widen(0.01, np.array([50.0, 12.5, 100.0]))
    seen = []
    for _ in range(4):  # 4 steps of a quarter of every resource: idle to full
        seen.append(book.prices(0, 1)[0, 0].copy())
        book.reserve(0, np.array([[2.0, 8.0, 1.0]]))
    seen.append(book.prices(0, 1)[0, 0])
    seen = np.array(seen)
    assert (np.diff(seen, axis=0) > 0).all()  # every resource dearer with every reservation
    assert np.allclose(seen[0], book.L)  # idle: L
    assert np.allclose(seen[-1], book.U)  # full: U_r
    assert (seen >= book.L - 1e-12).all() and (seen <= book.U + 1e-9).all()
    book.reserve(0, np.array([[100.0, 100.0, 100.0]]))  # over-reserved still caps at U
    assert (book.prices(0, 1) <= book.U + 1e-9).all()
    assert book.alpha == pytest.approx(np.log(100.0 / 0.01))


def test_sigmoid_utility_is_non_increasing_and_halves_at_the_target():
    t = np.linspace(0, 5000, 50)
    f = sigmoid_utility(10.0, 2000.0, 5.0, t, 300.0)
    assert (np.diff(f) <= 0).all()
    assert sigmoid_utility(10.0, 2000.0, 5.0, 2000.0, 300.0) == pytest.approx(5.0)


def test_dp_picks_the_hand_checked_cheapest_schedule():
    # Slot 0: both servers have one GPU reserved (GPU price 4); slots 1-2 idle (price 1).
    # A worker costs cpu 1 + mem 1 + its GPU's price, a PS 2. The job needs 2 worker-slots:
    #   2 workers in slot 0 (one per server): 2*(2+4) + 2 = 14
    #   1 worker in slot 0, 1 in slot 1:      (6+2) + (3+2) = 13
    #   2 workers in slot 1 on one server:     2*3 + 2 = 8   <- cheapest, done by slot 1
    job = toy_job()
    policy, _ = toy_policy(job)
    policy.book.reserve(0, np.array([[0, 0, 1.0], [0, 0, 1.0]]))
    sched, why = policy.plan(job, 0)
    assert why == ""
    assert sched.cost == pytest.approx(8.0)
    assert set(sched.slots) == {1}
    workers, ps = sched.slots[1]
    assert sum(workers.values()) == 2 and len(workers) == 1  # both on one server
    assert sum(ps.values()) == 1
    assert sched.completion_slot == 1
    expected = sigmoid_utility(10.0, 10_000.0, 5.0, 200.0, 100.0)
    assert sched.utility == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(6))
def test_dp_matches_brute_force_over_per_slot_options(seed):
    rng = np.random.default_rng(seed)
    job = toy_job(work=400.0)
    policy, _ = toy_policy(job, work_levels=4, horizon_slots=3)
    for slot in range(3):  # random reservations make the slots differently priced
        policy.book.reserve(slot, np.array([[rng.integers(0, 6), 0, rng.integers(0, 3)],
                                            [rng.integers(0, 6), 0, rng.integers(0, 3)]]))
    sched, _ = policy.plan(job, 0)
    opts = policy._options(job)
    cost, _ = policy._slot_costs(job, opts, 0, 3)
    f = sigmoid_utility(10.0, 10_000.0, 5.0, 100.0 * np.arange(1, 4), 100.0)
    best = -np.inf
    choices = [None] + list(range(len(opts.workers)))
    for combo in itertools.product(choices, repeat=3):
        units = sum(opts.units[i] for i in combo if i is not None)
        if units < 4:
            continue
        c = sum(cost[t, i] for t, i in enumerate(combo) if i is not None)
        last = max(t for t, i in enumerate(combo) if i is not None)
        best = max(best, f[last] - c)
    if not np.isfinite(best):
        assert sched is None
    else:
        assert sched.payoff == pytest.approx(best)


@pytest.mark.parametrize("seed", range(8))
def test_a_must_finish_schedule_costed_a_chunk_at_a_time_is_the_one_costed_whole(seed):
    """A job that must finish (a replan) takes its earliest completion; costing the slots a
    few at a time until one is found, and skipping the dynamic programme where no slot
    sequence can finish the work, gives exactly the schedule costed over the whole horizon."""
    rng = np.random.default_rng(seed)
    job = toy_job(work=float(rng.integers(100, 2000)))
    results = []
    for chunk in (2, 40):  # 40: the whole horizon at once
        policy, _ = toy_policy(job, work_levels=10, horizon_slots=40)
        policy.earliest_chunk = chunk
        r = np.random.default_rng(seed + 100)
        for slot in range(40):
            policy.book.reserve(slot, np.array([[r.integers(0, 9), 0, r.integers(0, 3)],
                                                [r.integers(0, 9), 0, r.integers(0, 3)]]))
        sched, why = policy.plan(job, 0, floor=False)
        results.append(why if sched is None else
                       (sched.slots, sched.cost, sched.completion_slot, sched.utility))
    assert results[0] == results[1]


def test_a_job_that_cannot_finish_within_the_horizon_is_not_costed():
    """At its fastest in every slot the job would not finish within the horizon: no slot is
    costed (the dynamic programme, ~19 ms a job at Philly scale, would find nothing)."""
    job = toy_job(work=1e6)
    policy, _ = toy_policy(job, work_levels=10, horizon_slots=5)

    def costed(*a, **k):
        raise AssertionError("slots costed")

    policy._slot_costs = costed
    sched, why = policy.plan(job, 0, floor=False)
    assert sched is None and "no feasible schedule within 5 slots" in why


def allreduce_job(work: float, weight: int = 10) -> JobSpec:
    return JobSpec(name="ar", application="toy", arrival=0.0, total_work=work, batch_size=1,
                   initial_workers=1, min_workers=1, max_workers=2, worker_demand=WORKER,
                   priority=weight, deadline=10_000.0)


def reserve_randomly(policy: OasisPolicy, slots: int, seed: int, cpu_only: int = 0) -> None:
    r = np.random.default_rng(seed)
    for slot in range(slots):
        policy.book.reserve(slot, np.array([[r.integers(0, 9), 0, r.integers(0, 3)],
                                            [r.integers(0, 9), 0, r.integers(0, 3)]]))
    for slot in range(cpu_only):  # one CPU free on `a`, none on `b`: a worker fits, no PS
        policy.book.used[slot, :, 0] = [7.0, 8.0]
        policy.book.used[slot, :, 2] = 0.0


def costed_whole(policy: OasisPolicy, job: JobSpec, horizon: int):
    """The must-finish schedule of the programme run over the whole horizon at once."""
    opts = policy._options(job)
    cost, c_opt, best, choice, picks = policy._cheapest(job, opts, 0, horizon)
    finite = np.flatnonzero(np.isfinite(best[:, -1]))
    if not len(finite):
        return None
    steps = _path(choice, c_opt, int(finite[0]), policy.work_levels)
    total = 0.0
    for t, i in steps:
        total += float(cost[t, i])
    counts = {t: (int(opts.workers[i]), int(opts.ps[i])) for t, i in steps}
    return counts, total, max(counts)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kind", ["allreduce", "ps, its PS not fitting at first"])
def test_a_must_finish_schedule_is_the_programmes_over_the_whole_horizon(seed, kind):
    """A job that must finish takes the earliest completion of the programme over the whole
    horizon, whether found from its earliest possible end (slots costed up to it, then a few
    more at a time: a PS job's PS may not fit where its workers do) or, without PS and with
    no slack before that end (each slot doing its most units), with no programme at all."""
    work = [150.0, 300.0, 450.0, 700.0, 1100.0, 1600.0, 1900.0, 250.0, 900.0, 1300.0][seed]
    job = allreduce_job(work) if kind == "allreduce" else toy_job(work=work)
    policy, _ = toy_policy(job, work_levels=10, horizon_slots=40)
    policy.earliest_chunk = 2
    reserve_randomly(policy, 40, seed + 100, cpu_only=0 if kind == "allreduce" else 6)
    sched, why = policy.plan(job, 0, floor=False)
    expected = costed_whole(policy, job, 40)
    if expected is None:
        assert sched is None and why
        return
    counts, total, last = expected
    assert {t: sched.counts(t) for t in sched.slots} == counts
    assert sched.cost == total and sched.completion_slot == last  # the same sums, exactly
    if kind != "allreduce":
        assert sched.completion_slot >= 6  # not before its PS fit


@pytest.mark.parametrize("seed", range(6))
def test_slot_costs_of_a_job_without_ps_all_at_once_equal_slot_by_slot(seed):
    """Costed for all slots at once, a job without PS gets exactly the per-slot greedy's costs
    and servers (the programme compares costs for equality)."""
    rng = np.random.default_rng(seed)
    nodes = [Node(f"n{i}", float(rng.integers(4, 17)), 64.0, int(rng.integers(1, 5)))
             for i in range(6)]
    demand = Resources(cpu=float(rng.integers(1, 4)), mem=2.0, gpu=float(seed % 2))
    job = JobSpec(name="ar", application="toy", arrival=0.0, total_work=5000.0, batch_size=1,
                  initial_workers=1, min_workers=1, max_workers=int(rng.integers(2, 9)),
                  worker_demand=demand, deadline=10_000.0)
    policy = OasisPolicy(perf=LinearPerf(), round_interval=100.0, restart_delay=0.0,
                         work_levels=10, horizon_slots=20, bounds=BOUNDS)
    backend = SimBackend(nodes, [job], perf=LinearPerf())
    backend.advance(0.0)
    policy._setup(backend.observe())
    cap = policy.book.capacity
    for slot in range(20):
        policy.book.reserve(slot, np.floor(cap * rng.uniform(0, 1, cap.shape)))
    opts = policy._options(job)
    cost, picks = policy._slot_costs(job, opts, 0, 20)
    prices, free = policy.book.prices(0, 20), policy.book.free(0, 20)
    one_by_one, their_picks = policy._costs_with_ps(job, opts, prices, free)  # per slot
    assert np.array_equal(cost, one_by_one)
    for t in range(20):
        for w in range(1, int(opts.workers.max()) + 1):
            if w in their_picks[t]:
                assert np.array_equal(picks[t][w][0], their_picks[t][w][0])
            else:
                with pytest.raises(KeyError):
                    picks[t][w]


def test_fit_counts_the_tasks_each_server_takes():
    def by_where(free, demand):  # the formula before: a min over every resource
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(demand > 0, np.floor((free + 1e-9) / np.where(demand > 0, demand, 1)),
                           np.inf)
        counts = per.min(axis=-1)
        return np.where(np.isfinite(counts), counts, 10**6).astype(np.int64)

    rng = np.random.default_rng(0)
    free = np.floor(rng.uniform(0, 20, (7, 5, 3))) / 2
    for demand in ([1.0, 2.0, 1.0], [0.5, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]):
        assert np.array_equal(_fit(free, np.array(demand)), by_where(free, np.array(demand)))


def test_bounds_widened_once_per_job_shape_are_the_bounds_widened_every_time():
    """A job shape's bounds are applied to a book once: again they would move nothing."""
    jobs = [toy_job(work=float(w), weight=p) for w, p in [(300, 3), (900, 12), (300, 3),
                                                         (500, 40), (900, 12), (200, 1)]]
    books = []
    for forget in (False, True):
        policy, _ = toy_policy(jobs[0], work_levels=10, horizon_slots=20, bounds=None)
        for job in jobs * 2:
            if forget:
                policy._bounds.clear()
            policy.plan(job, 0)
            policy.plan(job, 0, floor=False)
        books.append((policy.book.L, policy.book.U.tolist()))
    assert books[0] == books[1]


def test_negative_payoff_is_rejected_with_the_reason():
    job = toy_job()
    policy, backend = toy_policy(job, bounds=(100.0, {"cpu": 100.0, "mem": 100.0, "gpu": 100.0}))
    actions = policy.schedule(backend.observe())
    rejects = [a for a in actions if isinstance(a, Reject)]
    assert [a.job for a in rejects] == ["toy"]
    assert "payoff" in rejects[0].reason and "cost" in rejects[0].reason
    assert not any(isinstance(a, (Admit, Place)) for a in actions)
    assert policy.engine_view()["rejected"] == {"toy": rejects[0].reason.removeprefix("rejected: ")}


def test_positive_payoff_is_admitted_and_placed():
    job = toy_job()
    policy, backend = toy_policy(job)
    actions = policy.schedule(backend.observe())
    assert isinstance(actions[0], Admit) and "payoff" in actions[0].reason
    assert any(isinstance(a, Place) for a in actions)


def test_admitted_schedules_never_exceed_capacity():
    nodes = preset("small")
    jobs = philly_ps_workload(50, seed=3, load=2.0, cluster_gpus=16)
    policy = OasisPolicy()
    backend = SimBackend(nodes, jobs)
    controller = Controller(backend, policy)
    rounds = 0
    while controller.step() is not None:
        rounds += 1
        cap = policy.book.capacity
        assert (policy.book.used <= cap + 1e-6).all()
        assert (backend.allocated <= backend.capacity + 1e-6).all()
        for sched in policy.schedules.values():
            spec = policy._specs[sched.job]
            for w, p in sched.slots.values():
                assert spec.min_workers <= sum(w.values()) <= spec.max_workers
                assert -(-sum(w.values()) // policy.workers_per_ps) <= sum(p.values()) <= sum(w.values())
    assert rounds > 5
    assert not controller.stalled
    done = [j for j in backend.jobs.values() if j.state.value == "completed"]
    assert done and all(j.admitted for j in done)
    view = policy.engine_view()
    assert view["resources"] == ["cpu", "mem", "gpu"]
    assert view["price_history"] and len(view["price_history"][0]["price"]) == 3
    assert view["competitive_ratio"] == pytest.approx(2 * view["alpha"])
    lo, hi = view["L"], max(view["U"].values())
    for entry in view["price_history"]:
        assert all(lo - 1e-12 <= p <= hi + 1e-9 for p in entry["price"])


def test_a_new_oasis_instance_honours_the_jobs_admitted_before_it():
    """A standby scheduler taking over the lease (or a switch back to OASiS) starts with no
    schedules: the jobs already admitted or running get one for their remaining work, and none
    of them is rejected (on the cluster the admitted flag is not kept, so a paused job could be
    priced out by the new leader)."""
    nodes = preset("small")
    jobs = philly_ps_workload(50, seed=3, load=2.0, cluster_gpus=16)
    backend = SimBackend(nodes, jobs)
    controller = Controller(backend, OasisPolicy())
    controller.run(until=jobs[len(jobs) // 2].arrival)
    before = backend.observe()
    started = {n for n, j in before.jobs.items() if not j.state.finished
               and (j.admitted or j.state.placed or j.progress > 0)}
    for name in started:  # as a new leader reads them from the cluster: no admitted flag
        backend.jobs[name].admitted = False
    assert len(started) >= 5
    fresh = OasisPolicy()
    controller.switch(fresh)
    while not fresh.decided:
        controller.step()
    assert started <= fresh.decided
    live = {n for n in started if not backend.jobs[n].state.finished}
    assert live and live <= set(fresh.schedules), "a job it inherited got no schedule"
    controller.run()
    assert not started & set(fresh.rejected)
    assert all(backend.jobs[n].state.value == "completed" for n in started)


class _OptimisticPerfFake:
    """A speed model twice as fast as the simulator's (a fake: it stands for a cluster slower
    than the model, where every schedule overruns)."""

    def __init__(self, perf):
        self._perf = perf

    def __getattr__(self, name):
        return getattr(self._perf, name)

    def ps_speed(self, *args, **kwargs):
        return 2.0 * self._perf.ps_speed(*args, **kwargs)


def test_a_job_that_overruns_its_schedule_gets_a_new_one_for_what_is_left():
    """On the cluster jobs ran slower than planned; past their schedule they waited for
    leftovers that later arrivals' reservations never left (137 of 1,000 stuck in a soak)."""
    from workbench.perf import default_perf

    nodes = preset("small")
    jobs = philly_ps_workload(60, seed=5, load=2.0, cluster_gpus=16)
    backend = SimBackend(nodes, jobs)
    policy = OasisPolicy(perf=_OptimisticPerfFake(default_perf()))
    controller = Controller(backend, policy)
    while controller.step() is not None:
        s = policy._slot
        for name in policy.decided - set(policy.rejected):
            job = backend.jobs[name]
            sched = policy.schedules.get(name)
            if job.state.finished or not (job.admitted or job.progress > 0):
                continue
            assert sched is not None and sched.completion_slot >= s, (name, s)
    done = [j for j in backend.jobs.values() if j.state.value == "completed"]
    assert len(done) + len(policy.rejected) == len(jobs)


def test_registered_and_deterministic():
    nodes = make_cluster(2, 4)
    jobs = philly_ps_workload(15, seed=1, load=1.5, cluster_gpus=8)
    from workbench.experiment import run_policy

    a = run_policy(nodes, jobs, "oasis").controller.recorder.decisions
    b = run_policy(nodes, jobs, make_policy("oasis")).controller.recorder.decisions
    assert [(d.time, d.action, d.job, d.reason) for d in a] == \
           [(d.time, d.action, d.job, d.reason) for d in b]
