"""Shared pieces of the loaders: the job-list type, batch sizes, elastic ranges, ideal rates."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..model import JobSpec, Resources

WORKER_DEMAND = Resources(cpu=4, mem=16, gpu=1)
MAX_WORKERS_CAP = 64

# Total batch sizes whose convergence was measured (validation-<batch>.csv in the Pollux
# profiles). The smallest one is the application's batch size on one GPU in the Pollux workloads.
MEASURED_BATCH_SIZES: dict[str, tuple[int, ...]] = {
    "bert": (12, 24, 48, 96, 192, 384),
    "cifar10": (128, 256, 512, 1024, 2048, 4096),
    "deepspeech2": (20, 40, 80, 160, 320, 640),
    "imagenet": (200, 400, 800, 1600, 3200, 6400, 12800),
    "ncf": (256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    "yolov3": (8, 16, 32, 64, 128, 256, 512),
}


class Jobs(list):
    """A list of `JobSpec`s that also says where it came from and what the loader did.

    `source` names the trace; `skipped` counts rows left out, by reason; `notes` are short
    sentences for people (shown by `workbench trace show`).
    """

    def __init__(self, jobs: Iterable[JobSpec] = (), *, source: str = "",
                 skipped: dict[str, int] | None = None, notes: list[str] | None = None):
        super().__init__(jobs)
        self.source = source
        self.skipped = dict(skipped or {})
        self.notes = list(notes or [])


def check_batch_sizes(table, perf, column: str = "batch_size",
                      app_column: str = "application") -> None:
    """Every row's batch size must lie in its application's measured range (the model
    extrapolates beyond it without a word); the first that does not raises `InputError`."""
    apps = np.asarray(table[app_column]).astype(str)
    sizes = np.asarray(table[column], dtype=float)
    low, high = np.zeros(len(sizes)), np.zeros(len(sizes))
    for app in np.unique(apps):
        measured = perf.measured_batch_sizes(str(app))
        low[apps == app], high[apps == app] = min(measured), max(measured)
    bad = (sizes < low) | (sizes > high)
    if bad.any():
        row = int(np.argmax(bad))
        raise table.fail(row, column, f"a batch size the {apps[row]} profile measured"
                                      f" ({low[row]:,.0f} to {high[row]:,.0f})")


def elastic_max_workers(initial: int, cap: int = MAX_WORKERS_CAP) -> int:
    """Largest worker count an elastic engine may give a job: twice its submitted size, at most
    `cap`, never below the submitted size."""
    return max(initial, min(2 * initial, cap))


def suited_batch_size(app: str, gpus: int) -> int:
    """A measured total batch size for `app` on `gpus` GPUs: the largest measured size not above
    (one-GPU size × gpus), so the per-GPU batch never exceeds the one-GPU batch."""
    sizes = MEASURED_BATCH_SIZES.get(app)
    if not sizes:
        raise KeyError(f"no measured batch sizes for application {app!r}")
    target = sizes[0] * max(int(gpus), 1)
    fitting = [b for b in sizes if b <= target]
    return fitting[-1] if fitting else sizes[0]


def suited_batch_sizes(apps: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """`suited_batch_size` for arrays, computed once per distinct (app, gpus) pair."""
    keys, inverse = distinct(apps, gpus)
    values = [suited_batch_size(a, int(g)) for a, g in keys]
    return np.asarray(values, dtype=np.int64)[inverse]


def distinct(*columns: np.ndarray) -> tuple[list[tuple], np.ndarray]:
    """The distinct rows of parallel columns, and for each row the index of its distinct row."""
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        c, u = pd.factorize(col)
        codes = codes * len(u) + c
    first, inverse = np.unique(codes, return_index=True, return_inverse=True)[1:]
    keys = [tuple(col[i] for col in columns) for i in first]
    return keys, inverse.ravel()


class RateCache:
    """`perf.ideal_rate` memoised per (application, batch size, workers)."""

    def __init__(self, perf, gpus_per_node: int = 4):
        self.perf, self.gpus_per_node = perf, gpus_per_node
        self._rates: dict[tuple[str, int, int], float] = {}

    def __call__(self, app: str, batch_size: int, workers: int) -> float:
        key = (app, int(batch_size), int(workers))
        rate = self._rates.get(key)
        if rate is None:
            probe = JobSpec(name=f"probe-{app}", application=app, arrival=0.0, total_work=1.0,
                            batch_size=int(batch_size), initial_workers=int(workers),
                            max_workers=int(workers))
            rate = float(self.perf.ideal_rate(probe, int(workers),
                                              gpus_per_node=self.gpus_per_node))
            if not rate > 0:
                raise ValueError(f"performance model gives rate {rate} for {key}")
            self._rates[key] = rate
        return rate

    def many(self, apps: np.ndarray, batch_sizes: np.ndarray, workers: np.ndarray) -> np.ndarray:
        """Rates for arrays, one model call per distinct triple."""
        triples, inverse = distinct(apps, batch_sizes, workers)
        values = [self(str(a), int(b), int(w)) for a, b, w in triples]
        return np.asarray(values, dtype=float)[inverse]


def default_perf():
    """The shared performance model (imported late: `workbench.perf` is built separately)."""
    from ..perf import default_perf as make

    return make()
