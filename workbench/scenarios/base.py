"""A paper's own setting, as data: its cluster, its job mix, the simulator mechanisms it
needs, the engine it introduced, the baselines it beat, and the claims it made.

A `Scenario` is what `workbench simulate --scenario NAME` runs and `workbench bench paper`
measures: each `Claim` says which metric the paper improved, against which baseline, by how
much (the paper's figure, cited), so the bench can print ours beside it. Every number a
scenario takes from a paper carries its citation next to it; every guess is marked as one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import JobSpec, Node


@dataclass(frozen=True)
class Claim:
    """One headline result: `engine` beat `baseline` on `metric` by `paper_gain_pct` %.

    `metric` is a key of `metrics.run_metrics` (`avg_jct_h`, `makespan_h`,
    `gpu_alloc_util`, ...) or, with `measure`, any figure computed from the two runs
    (`measure(ours, theirs) -> gain %`, e.g. the best single job's JCT gain). A gain is
    positive when the engine is better: lower for `lower_is_better`, higher otherwise."""

    label: str
    metric: str
    baseline: str
    paper_gain_pct: float
    source: str  # where the figure is printed: paper, section, table or figure
    lower_is_better: bool = True
    measure: Callable[[Any, Any], float] | None = None
    # The run that made the claim, when it is one part of the paper's engine (e.g. its
    # scheduling alone); None: the scenario's `engine`.
    engine: str | None = None

    def gain(self, ours, theirs) -> float:
        """Our engine's gain over the baseline in %, from two `experiment.RunResult`s."""
        if self.measure is not None:
            return float(self.measure(ours, theirs))
        a, b = float(ours.metrics[self.metric]), float(theirs.metrics[self.metric])
        if b == 0:
            return 0.0 if a == b else float("nan")
        return (b - a) / b * 100 if self.lower_is_better else (a - b) / b * 100


@dataclass(frozen=True)
class Scenario:
    """A paper's setting. `engines` maps a run's label to (engine name, engine options): the
    paper's engine under `engine` and each baseline under its own label, as the claims name
    them. `nodes()` is the cluster; `jobs(seed)` the seeded job mix; `sim_options` go to the
    simulator (`SimBackend`: `contention`, `restart_delay`, ...), switching on the mechanisms
    the setting needs. `run`, when given, replaces the simulator run for settings the
    simulator cannot express: `run(scenario, label, seed) -> experiment.RunResult`."""

    name: str
    title: str
    paper: str  # the citation of the paper whose setting this is
    engine: str  # the label of the paper's own engine in `engines`
    engines: Mapping[str, tuple[str, Mapping[str, Any]]]
    nodes: Callable[[], Sequence[Node]]
    jobs: Callable[[int], Sequence[JobSpec]]
    claims: Sequence[Claim]
    sim_options: Mapping[str, Any] = field(default_factory=dict)
    seeds: int = 3  # how many seeds `bench paper` averages over by default
    notes: str = ""  # what could not be reconstructed, and the guesses made
    run: Callable[..., Any] | None = None

    @property
    def baselines(self) -> list[str]:
        return [label for label in self.engines if label != self.engine]

    def claim_engine(self, claim: Claim) -> str:
        """The label of the run that made `claim` (its own `engine`, else the scenario's)."""
        return claim.engine or self.engine
