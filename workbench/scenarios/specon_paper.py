"""SpeCon's own setting (Mao, Fu, Zheng, Cheng, Liu, Tao, "Speculative Container Scheduling for
Deep Learning Applications in a Kubernetes Cluster", arXiv 2010.11307, IEEE Systems Journal
2021): short-lived training containers on a small CPU Kubernetes cluster, placed by the
default scheduler with no CPU limits so that co-located containers compete for cores;
SpeCon against the default Kubernetes scheduler.

What the paper states. Our sources hold its abstract (/work/shared/seeds/001_*.txt, also on
arXiv, preprints.org 202010.0534 and ar5iv; the search tool returns only the pages' opening
paragraphs, so the evaluation section, testbed and figures could not be read):
- "a novel container scheduler that is optimized for short-lived deep learning applications",
  on Kubernetes and Docker, sharing "physical resources, e.g., CPU and memory";
- it monitors training progress and "speculatively migrate[s] the slow-growing models to
  release resources for fast-growing ones";
- "SpeCon improves the completion time of an individual job by up to 41.5 %, 14.8 %
  system-wide and 24.7 % in terms of makespan" (the three claims below, all against the
  default scheduler the abstract calls "general scheduling approaches, such as spread
  priority and balanced resource schedulers").
We read "individual job by up to" as the largest JCT reduction of one job (same job, both
runs), "system-wide" as the mean JCT, and makespan as first arrival to last completion.

The mechanisms. The simulator's CPU contention (`contention=True`, sim/engine.py): a container
with no CPU limit uses `cpu_burst` x its request when it can; where a node's running containers
want more cores than it has, cores are shared by request and a job runs at the pace of its
most squeezed node. This is the default scheduler's behaviour the abstract describes
(containers sharing "physical resources, e.g., CPU"), and it applies to both engines alike.
SpeCon's growth rule (α = 0.1 over 10 epochs, the engine's defaults, policies/specon.py) and
its migration cost (one checkpoint-restart, the simulator's 30 s) are the engine's own; where
it may move a job (only to nodes the job oversubscribes nothing on) is the engine's reading,
not stated in our sources.

The experiment's public scripts (fishercht1995/Speculative-Migration: the migration
controller run with SpeCon's α and interval; its images are `fuyuqi1995/mig-*`, Yuqi Fu being
the paper's second author) give the testbed's shape: `system/system.yaml` runs the controller
on node-0 and one worker agent on each of node-1, node-2 and node-3 (3 worker nodes, CloudLab
Utah) with the arguments "0.1" and "10" (α and the interval, the engine's defaults); `test.py`
submits job1..job7 at 25, 43, 50, 65, 86, 142 and 192 s. The same group's scheduler repository
(fishercht1995/progress-based-k8s-scheduler, `notes.md`) shows such a job's pod: one container
(`fuyuqi1995/mig-lenet`, LeNet trained for 150 epochs) with no resource requests or limits, a
BestEffort pod, which kube-scheduler scores as if it asked for 100 millicores
(`DefaultMilliCPURequest`, used for pods without requests) and which TensorFlow runs with
thread pools as wide as the machine (its default: as many threads as cores), so pods sharing a
node share all its cores equally.

The SpeCon repository itself (fishercht1995/SpeCon, "actively tested on ... Kubernetes 1.17")
adds: its `Specon-system/Specon.yaml` again runs three worker agents with "0.1", "10"; its
example job (`examples/job.yaml`) is a bidirectional RNN (`wzheng33/birnn`, Wenjia Zheng being
the third author), again with no requests or limits; and `SpeCon/Evaluation/distribution.csv`,
a log of one run, shows nodes node-1..node-4, jobs up to job28 and 29 slow-growing verdicts in
13 minutes, 18 of them migrations, several into nodes that were running other jobs (the
engine's `destination="lighter"` reading; its default moves only to a node the job
oversubscribes nothing on). That run's arrivals are not in the log; `ablation` tries its shape.

The SpeCon repository also holds a figure of one evaluation run, `images/completion_bar.png`:
each of 50 jobs' completion time under "NS" (the native scheduler) and under SpeCon. Its bar
heights, read off the image's pixels (1.05 pixels per second, so within about 1 s), are
`FIGURE_NS_S` and `FIGURE_SPECON_S` below: the mean falls from 595.4 s to 551.9 s (7.3 %),
job 34 from 431 s to 250 s (42.0 %, the abstract's "up to 41.5 %" within the reading), 30 jobs
faster and 20 slower (most of jobs 1-20). So this run shows the single-job claim and half the
system-wide one; the fourth claim below compares with it. Its arrivals and node count are not
in the figure.

Guessed (each marked GUESS below): the nodes' cores and memory, and the models (LeNet on MNIST
is not among the project's profiles: a seeded mix of cifar10 and deepspeech2 stands in, each
trained for its profile's full run, whose flat tail is the paper's "slow-growing" phase).
"""

from __future__ import annotations

import numpy as np

from ..clusters import make_cluster
from ..model import JobSpec, Resources
from .base import Claim, Scenario

PAPER = ("Mao, Fu, Zheng, Cheng, Liu, Tao: Speculative Container Scheduling for Deep Learning"
         " Applications in a Kubernetes Cluster, arXiv 2010.11307 / IEEE Systems Journal 2021"
         " (abstract; experiment scripts fishercht1995/Speculative-Migration)")

# Speculative-Migration system/system.yaml: worker agents on node-1, node-2, node-3.
NODES = 3
# GUESS: 8 cores and 64 GiB per node (CloudLab Utah's node types are not named in the scripts).
NODE_CPUS, NODE_MEM = 8, 64
# Speculative-Migration test.py: `time_list = [25, 43, 50, 65, 86, 142, 192]`, job1..job7.
ARRIVALS_S = (25.0, 43.0, 50.0, 65.0, 86.0, 142.0, 192.0)
# GUESS: the models. The scripts' jobs are a CNN (LeNet, progress-based-k8s-scheduler notes.md)
# and an RNN (bidirectional RNN, SpeCon examples/job.yaml), neither profiled; of the project's
# profiles (perf/data) a CNN and an RNN whose runs span many epochs stand in (cifar10 100 epochs,
# deepspeech2 80: `PerfModel.max_epochs`), drawn per job from the seed, each trained for its
# profile's full run at its smallest measured batch size.
APPLICATIONS = ("cifar10", "deepspeech2")
# A BestEffort pod (no requests, notes.md's pod spec): kube-scheduler scores it as 100
# millicores and 200 MB (`DefaultMilliCPURequest`, `DefaultMemoryRequest`); TensorFlow's default
# thread pools use every core of the node, so it would use all NODE_CPUS cores alone.
CONTAINER = Resources(cpu=0.1, mem=0.2, gpu=0)
BURST = NODE_CPUS / CONTAINER.cpu


# fishercht1995/SpeCon images/completion_bar.png: completion time (s) of job 1..50, bar heights
# read off the image's pixels (tick marks 200 s = 210 px apart; within about 1 s).
FIGURE_NS_S = (640, 395, 218, 232, 395, 215, 636, 405, 651, 754, 432, 450, 603, 510, 266, 243,
               645, 751, 250, 342, 921, 353, 889, 610, 525, 1007, 377, 361, 877, 948, 1047, 427,
               1047, 431, 981, 815, 367, 981, 1015, 802, 390, 787, 785, 970, 363, 466, 973, 388,
               365, 467)
FIGURE_SPECON_S = (740, 434, 257, 254, 459, 218, 719, 491, 706, 637, 482, 442, 735, 484, 308,
                   331, 713, 793, 290, 305, 774, 228, 772, 810, 574, 826, 320, 282, 808, 835,
                   779, 555, 810, 250, 759, 725, 296, 750, 820, 763, 392, 777, 743, 770, 323,
                   399, 732, 341, 313, 272)


def figure_mean_gain_pct() -> float:
    """The mean completion time's reduction in the repository's figure, in %."""
    return (1 - sum(FIGURE_SPECON_S) / sum(FIGURE_NS_S)) * 100


def nodes() -> list:
    return make_cluster(NODES, 0, cpus=NODE_CPUS, mem=NODE_MEM, prefix="cpu")


def jobs(seed: int, arrivals: tuple[float, ...] = ARRIVALS_S) -> list[JobSpec]:
    """job1..jobN at `arrivals` (the experiment script's seven by default), each one
    BestEffort training container, its model drawn from `APPLICATIONS` by the seed."""
    from ..perf import default_perf

    perf = default_perf()
    rng = np.random.default_rng(seed)
    out = []
    for i, arrival in enumerate(arrivals):
        app = APPLICATIONS[int(rng.integers(len(APPLICATIONS)))]
        batch = perf.measured_batch_sizes(app)[0]
        out.append(JobSpec(f"job{i + 1}", app, float(arrival),
                           float(perf.total_iterations(app, batch)), batch,
                           worker_demand=CONTAINER, cpu_burst=BURST))
    return out


def job_times(run) -> dict[str, float]:
    """Each completed job's completion time (finish - arrival), in seconds."""
    return {j.name: j.finish_time - j.spec.arrival for j in run.backend.jobs.values()
            if j.finish_time is not None and j.state.value == "completed"}


def best_job_gain(ours, theirs) -> float:
    """The largest reduction of one job's completion time, in %, over the jobs both runs
    completed (the abstract's "individual job by up to")."""
    a, b = job_times(ours), job_times(theirs)
    gains = [(b[n] - a[n]) / b[n] * 100.0 for n in a if n in b and b[n] > 0]
    return max(gains) if gains else float("nan")



def _one_model(seed: int) -> list[JobSpec]:
    """The scenario's arrivals, every job cifar10 (one model for all, as the script's LeNet)."""
    return [j.with_(application="cifar10", batch_size=c.batch_size, total_work=c.total_work)
            for j, c in zip(jobs(seed), jobs_of("cifar10"))]


def jobs_of(app: str) -> list[JobSpec]:
    """One job of `app` per arrival of the scenario (seed-free)."""
    from ..perf import default_perf

    perf = default_perf()
    batch = perf.measured_batch_sizes(app)[0]
    return [JobSpec(f"job{i + 1}", app, a, float(perf.total_iterations(app, batch)), batch,
                    worker_demand=CONTAINER, cpu_burst=BURST) for i, a in enumerate(ARRIVALS_S)]


# Variants of the job list for `ablation`: the scenario's, one model only, and test.py's
# commented-out alternative schedule (20 jobs, one every 30 s).
# GUESS for the log's shape: 28 jobs one every 30 s (test.py's step) on node-1..node-4.
VARIANTS = {
    "scenario (3 nodes, 7 jobs, mixed models)": (NODES, jobs),
    "3 nodes, 7 jobs, cifar10 only": (NODES, _one_model),
    "3 nodes, 20 jobs every 30 s, mixed": (
        NODES, lambda seed: jobs(seed, tuple(30.0 * i for i in range(20)))),
    "the log's shape: 4 nodes, 28 jobs every 30 s, mixed": (
        4, lambda seed: jobs(seed, tuple(30.0 * i for i in range(28)))),
}


def ablation(seeds: int = 10) -> list[dict]:
    """Where the gains come from: for each cluster and job list of `VARIANTS`, `specon`,
    `specon-lighter` and `specon-hold` against kube-default on seeds 0..`seeds`-1: the claims'
    mean gains in %, the seeds on which each pointed the paper's way, and migrations per run
    (moves only, not holds)."""
    from ..experiment import run_policy

    ours = ("specon", "specon-lighter", "specon-hold")
    engines = {label: SCENARIO.engines[label] for label in ("kube-default",) + ours}
    rows = []
    for variant, (count, make_jobs) in VARIANTS.items():
        cluster = make_cluster(count, 0, cpus=NODE_CPUS, mem=NODE_MEM, prefix="cpu")
        gains: dict[tuple[str, str], list[float]] = {}
        moves = []
        for seed in range(seeds):
            specs = make_jobs(seed)
            runs = {label: run_policy(cluster, specs, engine, policy_options=dict(options),
                                      **SCENARIO.sim_options)
                    for label, (engine, options) in engines.items()}
            moves.append({label: runs[label].controller.policy.engine_view()["migrations"]
                          for label in ours})
            for label in ours:
                for claim in SCENARIO.claims:
                    gains.setdefault((label, claim.label), []).append(
                        claim.gain(runs[label], runs["kube-default"]))
        for label in ours:
            row = {"variant": variant, "engine": label,
                   "migrations_per_run": float(np.mean([m[label] for m in moves]))}
            for c in SCENARIO.claims:
                values = np.array(gains[(label, c.label)])
                row[c.label] = float(values.mean())
                row[c.label + " (seeds right way)"] = int((values > 0).sum())
            rows.append(row)
    return rows

SCENARIO = Scenario(
    name="specon-paper",
    title="SpeCon: short-lived CPU training containers without limits on a small cluster",
    paper=PAPER,
    engine="specon",
    engines={
        "specon": ("specon", {}),  # the engine's defaults: α = 0.1, 10-epoch interval
        "kube-default": ("kube-default", {}),  # the paper's baseline
        # Not in the paper: the same engine with migration off (whole-job least-allocated
        # placement only), so the gap to `specon` is what migrations won.
        "specon-no-migration": ("specon", {"migrate": False}),
        # Not in the paper: the engine's `hold` option (a slow-growing job with nowhere cooler
        # to go is paused until it can run without slowing others), a project extension.
        "specon-hold": ("specon", {"hold": True}),
        # The engine with the `lighter` destination rule (our reading of the deployment log's
        # moves into busy nodes; not the claims' run, as the paper's exact rule is not public).
        "specon-lighter": ("specon", {"destination": "lighter"}),
    },
    nodes=nodes,
    jobs=jobs,
    claims=(
        Claim("best single job's completion time", metric="jct", baseline="kube-default",
              paper_gain_pct=41.5,
              source="abstract: 'improves the completion time of an individual job by up to"
                     " 41.5 %'", measure=best_job_gain),
        Claim("mean JCT (system-wide)", metric="avg_jct_h", baseline="kube-default",
              paper_gain_pct=14.8, source="abstract: '14.8 % system-wide'"),
        Claim("makespan", metric="makespan_h", baseline="kube-default", paper_gain_pct=24.7,
              source="abstract: '24.7 % in terms of makespan'"),
        Claim("mean JCT, the authors' per-job figure (50 jobs)", metric="avg_jct_h",
              baseline="kube-default", paper_gain_pct=round(figure_mean_gain_pct(), 1),
              source="fishercht1995/SpeCon images/completion_bar.png, bar heights read off the"
                     " image (FIGURE_NS_S, FIGURE_SPECON_S)"),
    ),
    sim_options={"contention": True},
    # 10, not 3: on about half the seeds no job can move (gain exactly 0), so a 3-seed mean
    # swung from 0 to two thirds of the largest gain (3 seeds: 6.1 % mean JCT; 10: 8.8 %)
    seeds=10,
    notes=("Claims from the abstract and the authors' per-job figure; 3 worker nodes, the 7"
           " arrivals, α/interval and BestEffort pods from the experiment's scripts (fishercht1995/Speculative-Migration). Guesses:"
           " 8 cores per node, and a seeded cifar10/deepspeech2 mix standing in for LeNet."
           " Contention applies to both engines."),
)
