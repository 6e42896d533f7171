"""DL2 (Peng et al., 2019): a policy network resizes parameter-server jobs slot by slot.

Each slot (`round_interval`, 600 s) every job's allocation is decided afresh, step by step: the
network sees the scheduling window (up to `WINDOW` unfinished jobs, oldest first) and picks one
action: add a worker to job i, add a PS to job i, add both, or stop. Each step places one task on
the server with the most free room for it; invalid actions (job at its limit, no server fits) are
masked out. The slot ends on "stop" or when nothing more fits. Jobs whose worker and PS counts
did not change keep their placement; the others are (re)placed, paying a checkpoint-restart.

State per window job (as DL2's `INPUTS_GATE`): model type (one-hot over the PS models), time
since arrival, remaining work (fraction, and hours at one worker and one PS), dominant resource
share, workers and PS so far in this slot; we add the previous slot's workers and PS (so the
network can see what a change would restart) and three cluster features (free GPU and CPU
share, window fill). Deviation from the paper, said here once: the network's weights are shared
across window positions (DL2's JOB_CENTRAL_REPRESENTATION variant): a two-layer MLP scores each
job's three actions from that job's features, and a stop score comes from the mean of the jobs'
hidden features. It learns from far fewer samples than one dense layer over the whole window.

Training (`train_dl2`, `workbench train dl2`): supervised warm-up on the decisions of DRF
(DL2's elastic DRF: from zero each slot, a worker+PS bundle to the job with the smallest dominant
share until nothing fits) on Philly-derived workloads, then policy gradient with a time-based
baseline (REINFORCE; the mean return of several rollouts of the same workload at that slot) and
an entropy bonus, with DL2's reward: the sum over jobs of the fraction of the job's work done in
the slot. Rollouts run in `SlotEnv`, a slot-level twin of the simulator that uses the same
speed model and restart delay. The shipped weights (`dl2/data/dl2.npz`) are what `workbench train
dl2` writes with its default seed and settings.

Online learning (`learn=True`): the engine samples its actions, takes the observed normalised
progress between two rounds as that slot's reward, and does one policy-gradient step per slot
against a running-mean baseline.

Modules: `net` (the network and the shared window/action layout), `allocator` (one slot, step
by step), `env` (the slot-level training environment), `training`, `engine` (the registered
engine).
"""

from .allocator import JobView, SlotAllocator, Trajectory, drf_teacher, net_chooser
from .engine import Dl2Policy
from .env import SlotEnv
from .net import (
    ACTION_NAMES,
    GLOBAL_FEATURES,
    JOB_FEATURES,
    STOP,
    WINDOW,
    PolicyNet,
    load_shipped,
    masked_softmax,
    shipped_weights_path,
)
from .training import (
    TRAIN_SEED_BASE,
    VAL_SEED_BASE,
    TrainConfig,
    evaluate,
    teacher_dataset,
    train_dl2,
)

__all__ = ["ACTION_NAMES", "GLOBAL_FEATURES", "JOB_FEATURES", "STOP", "TRAIN_SEED_BASE",
           "VAL_SEED_BASE", "WINDOW", "Dl2Policy", "JobView", "PolicyNet", "SlotAllocator",
           "SlotEnv", "TrainConfig", "Trajectory", "drf_teacher", "evaluate", "load_shipped",
           "masked_softmax", "net_chooser", "shipped_weights_path", "teacher_dataset",
           "train_dl2"]
