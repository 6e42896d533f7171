"""DL2's training environment: a slot-level twin of the simulator for PS jobs, using the same
speed model and restart delay, so that rollouts cost milliseconds instead of a simulation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...model import JobSpec
from .allocator import Chooser, JobView, SlotAllocator, Trajectory, type_index
from .net import _EPS, MAX_PS, MAX_WORKERS, WINDOW


class SlotEnv:
    """A slot-level twin of the simulator for PS jobs: per slot, allocate afresh, advance each
    job at the fitted PS speed for the slot (minus the restart delay if its counts changed)."""

    def __init__(self, jobs: Sequence[JobSpec], capacity: np.ndarray, perf, types: Sequence[str],
                 slot: float = 600.0, restart_delay: float = 30.0, max_slots: int = 2000) -> None:
        self.specs = sorted(jobs, key=lambda s: (s.arrival, s.name))
        self.capacity = np.asarray(capacity, dtype=float)
        self.perf = perf
        self.types = tuple(types)
        self.slot = slot
        self.restart_delay = restart_delay
        self.max_slots = max_slots
        self.allocator = SlotAllocator(self.capacity, self.types, slot)
        self._speed: dict[tuple[str, int, int], float] = {}

    def speed(self, app: str, w: int, p: int) -> float:
        key = (app, w, p)
        s = self._speed.get(key)
        if s is None:
            s = self._speed[key] = float(self.perf.ps_speed(app, w, p)) if w and p else 0.0
        return s

    def run(self, choose: Chooser, record: bool = False) -> dict[str, Any]:
        """One episode. Returns rewards per slot, per-slot trajectories and the JCTs."""
        t = self.specs[0].arrival if self.specs else 0.0
        nxt = 0
        progress: dict[str, float] = {}
        prev: dict[str, tuple[int, int]] = {}
        active: list[JobSpec] = []
        finish: dict[str, float] = {}
        rewards: list[float] = []
        trajectories: list[Trajectory] = []
        for _ in range(self.max_slots):
            while nxt < len(self.specs) and self.specs[nxt].arrival <= t + 1e-9:
                active.append(self.specs[nxt])
                progress[self.specs[nxt].name] = 0.0
                nxt += 1
            if not active and nxt >= len(self.specs):
                break
            if not active:
                t += self.slot * math.ceil((self.specs[nxt].arrival - t) / self.slot - 1e-9)
                continue
            views = [self._view(s, t, progress[s.name], prev.get(s.name, (0, 0)))
                     for s in active]
            traj = Trajectory() if record else None
            step = choose
            if record:
                def step(X, G, jm, am, window, _choose=choose, _traj=traj):
                    _traj.Q.append(self.step_values(X, am, window))
                    return _choose(X, G, jm, am, window)
            self.allocator.allocate(views, self.capacity, step, traj)
            reward = 0.0
            still = []
            for s, v in zip(active, views):
                w, p = len(v.workers), len(v.ps)
                if w < s.min_workers or p < 1:
                    w, p = 0, 0
                rate = self.speed(s.application, w, p)
                changed = (w, p) != prev.get(s.name, (0, 0))
                prev[s.name] = (w, p)
                run = self.slot - (self.restart_delay if changed and w else 0.0)
                left = s.total_work - progress[s.name]
                if rate > 0 and rate * run >= left - 1e-9:
                    finish[s.name] = t + (self.slot - run) + left / rate
                    reward += left / s.total_work
                    continue
                done = rate * run
                progress[s.name] += done
                reward += done / s.total_work
                still.append(s)
            active = still
            rewards.append(reward)
            if record:
                trajectories.append(traj)
            t += self.slot
        jct = [finish[s.name] - s.arrival for s in self.specs if s.name in finish]
        return {"rewards": np.array(rewards), "trajectories": trajectories,
                "avg_jct": float(np.mean(jct)) if jct else float("nan"),
                "completed": len(jct), "jobs": len(self.specs)}

    def _gain(self, v: JobView, w: int, p: int) -> float:
        """Fraction of the job's work done this slot at (w, p) workers and PS."""
        if w < v.min_workers or p < 1:
            return 0.0
        run = self.slot - (self.restart_delay if (w, p) != (v.prev_workers, v.prev_ps) else 0.0)
        return min(self.speed(v.app, w, p) * run / v.total, v.remaining)

    def step_values(self, X: np.ndarray, am: np.ndarray, window: list[JobView]) -> np.ndarray:
        """Each action's change of the slot's normalised progress (DL2's reward, per step)."""
        base = len(self.types)
        Q = np.zeros(3 * WINDOW + 1)
        for i, v in enumerate(window):
            if not am[3 * i:3 * i + 3].any():
                continue
            w, p = round(X[i, base + 4] * MAX_WORKERS), round(X[i, base + 5] * MAX_PS)
            g0 = self._gain(v, w, p)
            for k, (dw, dp) in enumerate(((1, 0), (0, 1), (1, 1))):
                if am[3 * i + k]:
                    Q[3 * i + k] = self._gain(v, w + dw, p + dp) - g0
        return Q

    def _view(self, s: JobSpec, t: float, done: float, prev: tuple[int, int]) -> JobView:
        left = max(s.total_work - done, 0.0)
        return JobView(
            name=s.name, type_index=type_index(self.types, s.application), age=t - s.arrival,
            remaining=left / s.total_work,
            remaining_hours=left / max(self.speed(s.application, 1, 1), _EPS) / 3600.0,
            worker_demand=s.worker_demand.as_array(), ps_demand=s.ps_demand.as_array(),
            max_workers=min(s.max_workers, MAX_WORKERS), min_workers=s.min_workers,
            prev_workers=prev[0], prev_ps=prev[1], app=s.application, total=s.total_work)
