"""DL2's own setting (Peng, Bao, Chen, Wu, Meng, Wu, Guo, "DL2: A Deep Learning-driven Scheduler
for Deep Learning Clusters", arXiv 1909.06040): parameter-server jobs resized every 20-minute
slot on a cluster of small nodes, DL2 against DRF and Optimus on average JCT.

What the paper states: only its abstract is in our sources (/work/shared/seeds/): "DL2
outperforms ... by 44.1% and 17.5% in terms of average job completion time" against DRF and
Optimus. The setting is DL2's public simulator (pengyanghua/DL2, commit 0814e2b), read file by
file; numbers below cite its file and name:
- cluster, `parameters.py`: CLUSTER_NUM_NODES 96 (not LARGE_SCALE), NUM_RESR_SLOTS 8 per
  resource type; `trace.py`: 1 CPU = 1 slot, 1 GPU = 4 slots, so a node is 8 CPUs and 2 GPUs;
- jobs, `trace.py`: 8 MXNet models (ours: the same 8, with the speeds fitted from DL2's
  measured `config_speed.txt`), model drawn uniformly (JOB_LEN_PATTERN "Normal"); a worker
  takes 2 CPUs and 1 GPU (cnn-text-classification and dssm: 2 CPUs, no GPU), a PS 2 CPUs;
  length fixed per model (FIX_JOB_LEN): fraction (0.3, 0.96, 0.05, 0.54, 0.95, 0.46, 0.33,
  0.23) x MAX_NUM_EPOCHS 30,000 epochs of `epoch_sizes` (115, 115, 390, 120, 780, 193, 349,
  165) mini-batches (`job.py` step: epochs per slot = speed x TS_DURATION / epoch_size);
- arrivals, `trace.py` / `parameters.py`: TOT_NUM_JOBS 60, at most MAX_ARRVS_PER_TS 3 a slot
  following the Google-trace pattern for 3 (`arrv_pattern_3`) from a random offset of 0-4
  slots, TS_DURATION 1,200 s (the default "Ali_Trace" pattern's tables are empty in the public
  file, so it cannot be reproduced);
- every slot each job's workers and PS are decided afresh from zero (`rl_env.py`,
  `drf_env.py`, `optimus_env.py`), at most MAX_NUM_WORKERS 16 each.
- baselines: DRF is DL2's own elastic DRF (`drf_env.py`: a worker+PS bundle at a time to the
  job with the smallest dominant share until nothing fits), which is the engine's warm-up
  teacher (`dl2` with `teacher=True`); Optimus is the workbench's `optimus`.

Deviations, each a GUESS or a limit of ours: workers and PS are capped at 12, not 16 (DL2's
speed measurements, and our fit, cover 1-12); node memory (64 GiB) and task memory (4 GiB)
are not in DL2's model and never bind; our simulator charges its usual checkpoint-restart
delay when a job's size changes, DL2's simulator none as far as we read it. The network runs
with weights trained on this setting (`workbench train dl2 --scenario dl2-paper --install`:
supervised warm-up on the DRF teacher, then policy gradient, on seeded workloads of this
scenario; `policies/dl2/training.py` SCENARIO_BUDGET), not the Philly-trained default ones.
"""

from __future__ import annotations

import numpy as np

from ..model import JobKind, JobSpec, Node, Resources
from ..policies.dl2.net import shipped_weights_path
from ..traces.synthetic import PS_BATCH_PER_WORKER
from .base import Claim, Scenario

PAPER = ("Peng et al., DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters,"
         " arXiv 1909.06040 (abstract); setting from its simulator, pengyanghua/DL2")

NODES, NODE_CPUS, NODE_GPUS = 96, 8, 2  # parameters.py CLUSTER_NUM_NODES, 8 slots; trace.py
NODE_MEM = 64.0  # GUESS: memory is not a resource in DL2's simulator; never binds here
SLOT_S = 1_200.0  # parameters.py TS_DURATION
N_JOBS, MAX_ARRIVALS = 60, 3  # parameters.py TOT_NUM_JOBS, MAX_ARRVS_PER_TS
MAX_WORKERS = 12  # parameters.py MAX_NUM_WORKERS is 16; the measured speeds stop at 12
MAX_EPOCHS = 30_000  # parameters.py MAX_NUM_EPOCHS
# trace.py, per model in DL2's order: epochs as a fraction of MAX_EPOCHS, mini-batches per
# epoch, and whether a worker needs a GPU.
MODELS = {
    "resnet-50": (0.30, 115, True),
    "vgg-16": (0.96, 115, True),
    "resnext-110": (0.05, 390, True),
    "inception-bn": (0.54, 120, True),
    "seq2seq": (0.95, 780, True),
    "cnn-text-classification": (0.46, 193, False),
    "dssm": (0.33, 349, False),
    "wlm": (0.23, 165, True),
}
GPU_WORKER = Resources(cpu=2, mem=4, gpu=1)  # trace.py resr_workers [2, 4]: 2 CPUs, 1 GPU
CPU_WORKER = Resources(cpu=2, mem=4, gpu=0)  # trace.py resr_workers [2, 0]
PS = Resources(cpu=2, mem=4, gpu=0)  # trace.py resr_ps [2, 0]
# trace.py arrv_pattern_3: jobs arriving per slot (Google cluster trace, at most 3 used).
ARRIVALS_3 = (2, 57, 3, 3, 3, 4, 3, 3, 2, 2, 2, 2, 3, 3, 3, 2, 3, 3, 3, 3, 3, 2, 2, 3, 4, 3, 2,
              2, 2, 1, 2, 2, 2, 2, 2, 2, 3, 3, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 1, 2, 1, 2, 3,
              3, 3, 3, 3, 2, 2, 2, 2, 3, 2, 1, 2, 1, 2, 2, 2, 2, 2, 2, 3, 2)


def nodes() -> list[Node]:
    return [Node(f"dl2-{i:02d}", float(NODE_CPUS), NODE_MEM, NODE_GPUS, "K40", f"rack-{i // 8}")
            for i in range(NODES)]


def arrival_slots(seed: int) -> list[int]:
    """The slot each of the `N_JOBS` jobs arrives in: the pattern from a seeded offset of
    0-4 slots, at most `MAX_ARRIVALS` a slot, wrapping around as `trace.py` does."""
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, 5))
    slots: list[int] = []
    ts = 0
    while len(slots) < N_JOBS:
        count = min(MAX_ARRIVALS, ARRIVALS_3[(ts + offset) % len(ARRIVALS_3)])
        slots.extend([ts] * min(count, N_JOBS - len(slots)))
        ts += 1
    return slots


def jobs(seed: int) -> list[JobSpec]:
    """`N_JOBS` PS jobs: model uniform over DL2's 8 (seeded), arriving at the start of their
    slot, each elastic from 1 to `MAX_WORKERS` workers and PS, submitted at 1 + 1."""
    rng = np.random.default_rng(seed + 104_729)  # the models' own stream
    names = list(MODELS)
    out = []
    for i, slot in enumerate(arrival_slots(seed)):
        model = names[int(rng.integers(len(names)))]
        fraction, batches_per_epoch, gpu = MODELS[model]
        out.append(JobSpec(
            name=f"{model}-{i}", application=model, arrival=slot * SLOT_S,
            total_work=fraction * MAX_EPOCHS * batches_per_epoch,
            batch_size=PS_BATCH_PER_WORKER.get(model, 32),
            initial_workers=1, min_workers=1, max_workers=MAX_WORKERS, num_ps=1,
            worker_demand=GPU_WORKER if gpu else CPU_WORKER, ps_demand=PS, kind=JobKind.PS))
    return out


_SOURCE = "abstract (the evaluation section is not in our sources)"

SCENARIO = Scenario(
    name="dl2-paper",
    title="DL2: PS jobs resized every 20-minute slot on 96 small nodes (DL2's simulator)",
    paper=PAPER,
    engine="dl2",
    engines={
        # weights trained on this setting: `workbench train dl2 --scenario dl2-paper --install`
        "dl2": ("dl2", {"round_interval": SLOT_S,
                        "weights": str(shipped_weights_path("dl2-paper"))}),
        "drf": ("dl2", {"round_interval": SLOT_S, "teacher": True}),
        "optimus": ("optimus", {}),
    },
    nodes=nodes,
    jobs=jobs,
    claims=(
        Claim("average JCT vs DRF", metric="avg_jct_h", baseline="drf", paper_gain_pct=44.1,
              source=_SOURCE),
        Claim("average JCT vs Optimus", metric="avg_jct_h", baseline="optimus",
              paper_gain_pct=17.5, source=_SOURCE),
    ),
    seeds=3,
    notes=("Cluster, job mix, lengths, demands and arrivals from DL2's public simulator"
           " (parameters.py, trace.py, job.py); DRF is DL2's own elastic DRF (drf_env.py),"
           " run by the dl2 engine's teacher. Not reconstructed: the Ali trace arrival and"
           " length tables (empty in the public file; the Google pattern for 3 arrivals a slot"
           " and DL2's fixed per-model lengths instead), up to 16 workers (12: the measured"
           " speeds), no restart cost (ours charges its usual one). DL2 runs the weights trained"
           " on this setting by `workbench train dl2 --scenario dl2-paper --install` (a smaller"
           " budget than the paper's)."),
)
