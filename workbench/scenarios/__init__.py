"""Each seed engine in its own paper's setting (issue 17): one small module per paper, each
defining `SCENARIO` (a `base.Scenario`); this package finds them, so adding a paper is adding
a module.

    from workbench.scenarios import get, names, run_scenario
    scenario = get("specon-paper")
    result = run_scenario(scenario, "specon", seed=0)   # an experiment.RunResult
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from ..errors import ConfigError
from .base import Claim, Scenario

__all__ = ["Claim", "Scenario", "get", "names", "all_scenarios", "run_scenario", "dl2_training"]


@cache
def all_scenarios() -> dict[str, Scenario]:
    """Every scenario by name, from the modules of this package that define `SCENARIO`."""
    found: dict[str, Scenario] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        scenario = getattr(module, "SCENARIO", None)
        if isinstance(scenario, Scenario):
            found[scenario.name] = scenario
    return found


def names() -> list[str]:
    return sorted(all_scenarios())


def get(name: str, flag: str = "--scenario") -> Scenario:
    """The scenario called `name`, or a one-line `ConfigError` naming `flag` and the choices."""
    try:
        return all_scenarios()[name]
    except KeyError:
        raise ConfigError(f"{flag}: unknown scenario {name!r}; choose one of"
                          f" {', '.join(names()) or '(none)'}") from None


def run_scenario(scenario: Scenario, label: str, seed: int = 0, **run_options):
    """Run the engine `label` names in `scenario` (its engine or a baseline) on the
    scenario's cluster and seeded jobs, with the scenario's mechanisms on; an
    `experiment.RunResult`. `run_options` go to `experiment.run_policy`."""
    from ..experiment import run_policy

    if label not in scenario.engines:
        raise ConfigError(f"{scenario.name}: no engine {label!r}; it runs"
                          f" {', '.join(scenario.engines)}")
    if scenario.run is not None:
        return scenario.run(scenario, label, seed)
    engine, options = scenario.engines[label]
    result = run_policy(list(scenario.nodes()), list(scenario.jobs(seed)), engine,
                        policy_options=dict(options), **{**scenario.sim_options, **run_options})
    result.policy = label
    return result


def dl2_training(name: str, seed: int = 0, flag: str = "--scenario"):
    """How `workbench train dl2 --scenario NAME` trains: a `TrainConfig` (the scenario's slot,
    `SCENARIO_BUDGET`, `seed`) and the `Setting` (its cluster and seeded workloads), for a
    scenario whose engine is dl2; else a one-line `ConfigError`."""
    from ..policies.dl2.training import SCENARIO_BUDGET, Setting, TrainConfig

    scenario = get(name, flag)
    engine, options = scenario.engines.get(scenario.engine, ("", {}))
    if engine != "dl2":
        raise ConfigError(f"{flag}: {name} is not a DL2 setting (its engine is"
                          f" {engine or scenario.engine!r}); choose a scenario whose engine is dl2")
    cfg = TrainConfig(seed=seed, scenario=name, slot=float(options.get("round_interval", 600.0)),
                      **SCENARIO_BUDGET)
    return cfg, Setting(list(scenario.nodes()), lambda s: list(scenario.jobs(s)))
