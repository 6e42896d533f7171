"""OASiS's own setting (Bao, Peng, Wu, Li, "Online Job Scheduling in Distributed Machine
Learning Clusters", INFOCOM 2018): elastic parameter-server jobs, each with a sigmoid utility
of its completion time, admitted and sized online; OASiS against FIFO, DRF and Dorm on total
utility.

What the paper states, from the authors' slides (/work/shared/seeds/004_*.txt; the paper's
evaluation section itself is not in our sources):
- objective: maximise the total utility of the jobs, each utility non-increasing in the job's
  completion time; a job may be rejected (admission control: "accept jobs with positive
  payoff"); workers and PS per job may change from slot to slot ("Problem Formulation");
- trace-driven simulation: "Cluster configuration: Amazon EC2 CPU/GPU instances"; "Job
  resource demand: machine learning job trace from Dorm"; "Job arrival rate: Google cluster
  trace"; testbed: MXNet on Kubernetes 1.6 ("Trace-driven Simulation", "Testbed");
- "Comparison with heuristics": figures only. The baselines, FIFO, DRF and Dorm, are the ones
  the project's OASiS bench and docs/oasis-dl2-results.md name; our sources state no ratio.
So the claim has no figure (`paper_gain_pct` is NaN): only its direction can be checked.

Guessed (each marked GUESS below), since neither the Dorm job trace nor the Google arrival
trace is shipped and the paper's parameter table is not in our sources: the cluster's size and
its CPU instances, the job count, the load, the models, sizes and run times (the project's
synthetic PS jobs, `traces.synthetic.synthetic_workload(ps_jobs=True)`), the deadlines that
set each sigmoid's target, the utility weights, the decay and the slot length.
"""

from __future__ import annotations

import numpy as np

from ..clusters import make_cluster
from ..policies.oasis import job_utility
from ..traces.synthetic import synthetic_workload
from .base import Claim, Scenario

PAPER = ("Bao, Peng, Wu, Li: Online Job Scheduling in Distributed Machine Learning Clusters,"
         " IEEE INFOCOM 2018 (OASiS; the authors' slides)")

# Slides: "Amazon EC2 CPU/GPU instances". GUESS: 4 GPU servers of 4 GPUs, 48 vCPUs, 192 GiB
# (the project's `small` preset) and 4 CPU servers of 36 vCPUs, 60 GiB (a c4.8xlarge) where
# parameter servers (2 vCPUs, 8 GiB each) can go too.
GPU_NODES, GPUS_PER_NODE = 4, 4
CPU_NODES, CPU_NODE_CPUS, CPU_NODE_MEM = 4, 36, 60
N_JOBS = 120  # GUESS: enough for a few hours of arrivals at the load below
LOAD = 1.5  # GUESS: offered GPU demand at the submitted sizes / capacity (as `bench oasis`)
SUBMITTED_MAX_WORKERS = 8  # GUESS: submitted workers uniform 1..8 (synthetic PS jobs)
MAX_WORKERS = 12  # elastic range 1..12: the worker counts DL2's speed fits were measured at
WEIGHTS = (1, 100)  # GUESS: utility weight γ1 uniform in 1..100 (as `traces.ps_jobs`)
DEADLINE_FACTORS = (1.5, 4.0)  # GUESS: the sigmoid's target γ3 = U(1.5, 4) x run time
SLOT_S, DECAY = 300.0, 5.0  # GUESS: 5-minute slots, γ2 = 5 per slot (the engine's defaults)


def nodes() -> list:
    gpu = make_cluster(GPU_NODES, GPUS_PER_NODE, prefix="gpu")
    cpu = make_cluster(CPU_NODES, 0, cpus=CPU_NODE_CPUS, mem=CPU_NODE_MEM, prefix="cpu")
    return gpu + cpu


def jobs(seed: int) -> list:
    """`N_JOBS` synthetic PS jobs (Poisson arrivals, a DL2 PS model each, run times of 10 min
    to 4 h at the submitted size), made elastic (1..`MAX_WORKERS` workers), each with a
    utility weight, and the arrivals scaled so the offered load is `LOAD`."""
    base = synthetic_workload(N_JOBS, arrival_rate=1 / 60, max_workers=SUBMITTED_MAX_WORKERS,
                              deadline_factor=DEADLINE_FACTORS, ps_jobs=True, seed=seed)
    rng = np.random.default_rng(seed + 7_919)  # the weights' own stream
    weight = rng.integers(WEIGHTS[0], WEIGHTS[1] + 1, len(base))
    from ..perf import default_perf

    perf = default_perf()
    demand = sum(s.initial_workers * s.total_work / perf.ps_speed(s.application,
                 s.initial_workers, s.num_ps) for s in base)  # GPU-seconds at submitted sizes
    span = max(s.arrival for s in base) or 1.0
    stretch = demand / (LOAD * GPU_NODES * GPUS_PER_NODE * span)
    out = []
    for spec, w in zip(base, weight):
        arrival = spec.arrival * stretch
        out.append(spec.with_(arrival=arrival, deadline=arrival + spec.deadline - spec.arrival,
                              min_workers=1, max_workers=MAX_WORKERS, priority=int(w)))
    return out


def total_utility(run) -> float:
    """Every job scored with the same sigmoid of its actual completion (0 if never)."""
    from ..model import JobState
    from ..perf import default_perf

    perf = default_perf()
    return float(sum(job_utility(j.spec, j.finish_time if j.state is JobState.COMPLETED
                                 else None, perf, slot=SLOT_S, decay=DECAY)
                     for j in run.backend.jobs.values()))


def utility_gain(ours, theirs) -> float:
    """% more total utility than the baseline."""
    mine, base = total_utility(ours), total_utility(theirs)
    return (mine - base) / base * 100.0 if base > 0 else float("nan")


_SOURCE = ("slides, 'Comparison with heuristics' (figures only; no ratio in our sources):"
           " OASiS's total utility is the highest")

SCENARIO = Scenario(
    name="oasis-paper",
    title="OASiS: elastic PS jobs with sigmoid utilities, admission and per-slot sizing",
    paper=PAPER,
    engine="oasis",
    engines={
        "oasis": ("oasis", {"round_interval": SLOT_S, "decay": DECAY}),
        "fifo": ("fifo", {}),
        "drf": ("drf", {}),
        "dorm": ("dorm", {}),
    },
    nodes=nodes,
    jobs=jobs,
    claims=tuple(
        Claim(f"total utility vs {b}", metric="total_utility", baseline=b,
              paper_gain_pct=float("nan"), source=_SOURCE, lower_is_better=False,
              measure=utility_gain)
        for b in ("fifo", "drf", "dorm")),
    seeds=3,
    notes=("The paper's parameter table, the Dorm job trace and the Google arrival trace are"
           " not in our sources: 120 synthetic PS jobs (DL2's MXNet models, 1-8 workers"
           " submitted, elastic to 12, 10 min-4 h), Poisson arrivals at offered load 1.5 on"
           " 4 x 4 GPUs plus 4 CPU servers, utility weights 1-100, sigmoid target U(1.5, 4) x"
           " run time, 300 s slots, decay 5 per slot are guesses. No ratio is stated, so only"
           " the direction is checked."),
)
