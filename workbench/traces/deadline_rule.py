"""The seeded rule that gives a workload's jobs deadlines from their ideal run times.

    deadline = arrival + allowance + f × ideal run time at the submitted size

with f drawn per job: with chance `tight_share` a tight factor f ~ U(`tight`), otherwise a
loose one f ~ U(`loose`). Tight jobs leave little room for queueing or a small allocation, so
some are missed under load; loose ones are met by any reasonable engine. The default run
(`workbench serve`, `workbench simulate` on the default workload) uses `DeadlineRule()` with
the run's seed, so the console opens on deadlines that are met and missed and a P(meet) that
means something; `default:deadlines=none` loads the workload as the Pollux artifact has it.

The allowance (one 60 s scheduling round plus one 30 s restart, which every engine pays
before a job trains, rounded up) keeps the trace's many one-minute jobs from having deadlines
no scheduler could meet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

ALLOWANCE = 120.0  # seconds: one 60 s round + one 30 s restart, rounded up


@dataclass(frozen=True)
class DeadlineRule:
    """A mix of tight and loose deadlines, drawn with `seed` (see the module docstring)."""

    seed: int = 0
    tight_share: float = 0.5
    tight: tuple[float, float] = (1.0, 1.6)
    loose: tuple[float, float] = (2.0, 4.0)
    allowance: float = ALLOWANCE

    def __post_init__(self) -> None:
        if not 0 <= self.tight_share <= 1:
            raise ConfigError(f"deadline rule: tight_share must be within [0, 1], got"
                              f" {self.tight_share}")
        for name, (lo, hi) in (("tight", self.tight), ("loose", self.loose)):
            if not 0 < lo <= hi:
                raise ConfigError(f"deadline rule: {name} factors must be 0 < LOW <= HIGH, got"
                                  f" {lo}-{hi}")
        if not self.allowance >= 0:
            raise ConfigError(f"deadline rule: allowance must be >= 0, got {self.allowance}")

    def factors(self, n: int) -> np.ndarray:
        """The factor f of each of `n` jobs, in the order given (arrival order for a trace)."""
        rng = np.random.default_rng(self.seed)
        tight = rng.random(n) < self.tight_share
        return np.where(tight, rng.uniform(*self.tight, n), rng.uniform(*self.loose, n))

    def deadlines(self, arrivals: np.ndarray, ideal_run: np.ndarray) -> np.ndarray:
        """Deadline of each job from its arrival and ideal run time (seconds)."""
        arrivals = np.asarray(arrivals, dtype=float)
        return arrivals + self.allowance + self.factors(len(arrivals)) * np.asarray(ideal_run)

    def describe(self) -> str:
        return (f"deadline = arrival + {self.allowance:g} s + f × ideal run time, f ~"
                f" U({self.tight[0]:g}, {self.tight[1]:g}) for {self.tight_share:.0%} of jobs"
                f" (tight), U({self.loose[0]:g}, {self.loose[1]:g}) otherwise; seed {self.seed}")
