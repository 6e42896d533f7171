"""Labels and annotations the workbench reads and writes on Kubernetes objects.

One place for every `workbench.io/...` key, so the backend, the node emulator, the
manifests and the progress helper agree on spelling.

Pods of a training job (set by whoever creates the job: a user's batch/v1 Job template, the
backend when it re-creates a pod, or a test):

| key | kind | value |
|---|---|---|
| `workbench.io/job` | label | the job's name (one per training job; all its pods carry it); default: the PyTorchJob's, TFJob's or JobSet's name its operator labels the pod with (`kinds`) |
| `workbench.io/role` | label | `worker` or `ps`; default: a Kubeflow PS replica or a JobSet's `ps` job is `ps`, any other pod `worker` |
| `workbench.io/application` | annotation | application name the performance model knows (e.g. `cifar10`) |
| `workbench.io/total-work` | annotation | iterations to run, at `batch-size` |
| `workbench.io/batch-size` | annotation | global batch size (integer) |
| `workbench.io/num-workers` | annotation | workers the job needs before it trains (gang size); default: as many as run |
| `workbench.io/num-ps` | annotation | parameter servers it needs; default: as many as run |
| `workbench.io/checkpoint` | annotation | iterations already done when this pod was (re)created; on a Job (or Kubeflow job) the scheduler preempted or re-sized, the checkpoint its re-created pods resume from, for a scheduler that restarts before they run |
| `workbench.io/attained-service` | annotation | set with the checkpoint: the GPU-seconds the job had received (Tiresias ranks by it) |
| `workbench.io/restarts` | annotation | set with the checkpoint: how many times the scheduler had restarted the job (resumed it after a preemption, re-sized or moved it) |
| `workbench.io/deadline` | annotation | absolute deadline, Unix seconds |
| `workbench.io/min-workers`, `workbench.io/max-workers` | annotation | the worker range a policy may scale in |
| `workbench.io/arrival` | annotation | when the job arrived, on the scheduler's clock (default: pod creation) |
| `workbench.io/priority`, `workbench.io/user` | annotation | the job's priority (integer) and user |
| `workbench.io/target-metric`, `workbench.io/cpu-burst` | annotation | DQoES target; CPU burst factor |
| `workbench.io/rejected` | annotation | set by the scheduler on a refused job's pods/Job: the reason |

Written by the training process (or, on emulated nodes, by the node emulator):

| `workbench.io/progress` | annotation | JSON `{"iterations", "throughput", "metric", "time"}`: iterations done, iterations/s now, the latest metric of its curve (or null), and the time of the report (Unix seconds on the reporter's clock; the emulator's clock may run faster than real time) |

Plain pods on emulated nodes (no `workbench.io/job`) run until deleted, unless they carry:

| `workbench.io/duration` | annotation | seconds (emulated clock) after which the pod ends |
| `workbench.io/exit-code` | annotation | exit code it ends with (0: Succeeded, else Failed); default 0 |

Emulated nodes:

| `workbench.io/emulated` | label | `true`: the node emulator keeps this node alive and runs its pods |
| `workbench.io/rack` | label | rack (network locality domain) of the node |
| `workbench.io/gpu-model` | label | GPU model, e.g. `V100` |
| `workbench.io/down` | annotation | `true`: the emulator stops the node's heartbeats and reports it NotReady (fault tests) |
| `workbench.io/clock-speed` | annotation | set by the emulator: its clock's speed-up over real time; a scheduler not told a speed runs its clock at this one |
"""

from __future__ import annotations

PREFIX = "workbench.io/"

# Pod labels
JOB = PREFIX + "job"
ROLE = PREFIX + "role"
ROLE_WORKER = "worker"
ROLE_PS = "ps"

# Pod annotations describing the training job
APPLICATION = PREFIX + "application"
TOTAL_WORK = PREFIX + "total-work"
BATCH_SIZE = PREFIX + "batch-size"
NUM_WORKERS = PREFIX + "num-workers"
NUM_PS = PREFIX + "num-ps"
CHECKPOINT = PREFIX + "checkpoint"
SERVICE = PREFIX + "attained-service"
RESTARTS = PREFIX + "restarts"
DEADLINE = PREFIX + "deadline"
MIN_WORKERS = PREFIX + "min-workers"
MAX_WORKERS = PREFIX + "max-workers"
ARRIVAL = PREFIX + "arrival"
PRIORITY = PREFIX + "priority"
USER = PREFIX + "user"
TARGET_METRIC = PREFIX + "target-metric"
CPU_BURST = PREFIX + "cpu-burst"
REJECTED = PREFIX + "rejected"

# Written by the training process or the emulator
PROGRESS = PREFIX + "progress"

# Plain pods on emulated nodes
DURATION = PREFIX + "duration"
EXIT_CODE = PREFIX + "exit-code"

# Node labels
EMULATED = PREFIX + "emulated"
RACK = PREFIX + "rack"
GPU_MODEL = PREFIX + "gpu-model"
NODE_DOWN = PREFIX + "down"
CLOCK_SPEED = PREFIX + "clock-speed"

# Extended resource name of a GPU
GPU_RESOURCE = "nvidia.com/gpu"

# Scheduler name pods set to be placed by the workbench instead of kube-scheduler
SCHEDULER_NAME = "workbench"

# Node taint the node lifecycle controller sets until a node is Ready
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
