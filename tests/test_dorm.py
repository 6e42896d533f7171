"""Dorm: DRF water-filling of elastic jobs (plain-float arithmetic, the same sizes as numpy)."""

from __future__ import annotations

import heapq
import random

import numpy as np

from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.model import JobKind, JobSpec, Resources
from workbench.policies import make_policy
from workbench.policies.dorm import ps_for
from workbench.sim import SimBackend


def numpy_water_fill(state, jobs):
    """The water-filling as first written, on numpy 3-vectors: the reference."""
    cap = state.capacity[state.node_up].sum(axis=0)
    cap = np.where(cap > 0, cap, np.inf)
    budget = state.capacity[state.node_up].sum(axis=0).astype(float)

    def need(job, w):
        return job.spec.worker_demand.as_array() * w + job.spec.ps_demand.as_array() * ps_for(job, w)

    alloc = {}
    for job in sorted(jobs, key=lambda j: (not j.state.placed, j.spec.arrival)):
        n = need(job, job.spec.min_workers)
        if (n <= budget + 1e-9).all():
            alloc[job.name] = job.spec.min_workers
            budget -= n
    by_name = {j.name: j for j in jobs}
    heap = [(float((need(by_name[n], w) / cap).max()), by_name[n].spec.arrival, n)
            for n, w in alloc.items()]
    heapq.heapify(heap)
    while heap:
        _, _, name = heapq.heappop(heap)
        job, w = by_name[name], alloc[name]
        if w >= job.spec.max_workers:
            continue
        extra = need(job, w + 1) - need(job, w)
        if not (extra <= budget + 1e-9).all():
            continue
        alloc[name] = w + 1
        budget -= extra
        heapq.heappush(heap, (float((need(job, w + 1) / cap).max()), job.spec.arrival, name))
    return alloc


def random_jobs(rng: random.Random, n: int) -> list[JobSpec]:
    jobs = []
    for i in range(n):
        lo = rng.randint(1, 3)
        init = rng.randint(lo, lo + 3)
        gpu = rng.choice([1, 2, 0.5, 0.25, 0])
        ps = rng.choice([0, 0, 1, 2])
        kind = rng.choice([JobKind.PS, JobKind.ALLREDUCE]) if not ps else JobKind.PS
        app = "resnet-50" if kind is JobKind.PS else "cifar10"
        jobs.append(JobSpec(f"j{i:03d}", app, rng.choice([0.0, 1.0, 2.5, float(i)]), 1e4, 128,
                            init, lo, init + rng.randint(0, 5), num_ps=ps, kind=kind,
                            worker_demand=Resources(rng.choice([1, 2.5, 4]), rng.choice([4, 7.3, 16]), gpu),
                            ps_demand=Resources(rng.choice([1, 2]), rng.choice([2, 8.1]), 0)))
    return jobs


def test_water_fill_gives_the_numpy_sizes_round_after_round():
    rng = random.Random(7)
    for trial in range(6):
        jobs = random_jobs(rng, 40)
        nodes = make_cluster(rng.choice([2, 4]), rng.choice([0, 4]), 48, 192)
        backend = SimBackend(nodes, jobs)
        policy = make_policy("dorm")
        controller = Controller(backend, policy)
        for _ in range(8):
            state = backend.observe()
            active = sorted(state.active, key=lambda j: (j.spec.arrival, j.name))
            _, fine = policy._reject_impossible(state, active)
            if fine:
                got, _ = policy._water_fill(state, fine)
                want = numpy_water_fill(state, fine)
                assert got == want and list(got) == list(want), trial
            if controller.step() is None:
                break
