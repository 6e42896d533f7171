"""The policy interface and the registry of engines by name.

`make_policy` makes an engine from its name (`fifo`, or `fifo+fgd` with a placement plugin);
`check_engine` is the one check of such a name, used by `make_policy` and by every option
that names an engine before making it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError, unknown_keyword
from ..model import Action, ClusterState
from ..placement.ledger import Ledger


class Policy:
    """Sees a ClusterState, returns Actions. Keeps only its own learning state."""

    name: str = "policy"
    round_interval: float = 60.0  # seconds between scheduling rounds
    # Where the grid of rounds is anchored: None, at the first round (the first event); a time
    # t0, at t0 + k * round_interval, k >= 1 (the Pollux artifact's simulator: rounds at
    # multiples of its 60 s interval from t = 0, the first at 60 s).
    round_origin: float | None = None
    # Engines whose decisions change with time alone (aging, deadlines) want every round;
    # the others are only asked when something happened (arrival, completion, fault).
    needs_every_round: bool = False
    # Engines whose decisions don't depend on a job finishing its checkpoint-restart delay
    # set this, so the controller skips the rounds those moments would cost on long traces.
    quiet_restarts: bool = False
    # Engines whose node choice goes through `self.ledger(state)` take a placement plugin.
    takes_placement: bool = False
    # Engines that bind a gang's tasks one by one (kube-default) leave jobs half-placed
    # (HOLDING); every other engine starts a job's tasks together or not at all, and the
    # controller releases the half-placed jobs it finds as such an engine takes over.
    places_partial_gangs: bool = False
    placer = None  # a placer.Placer when a placement plugin chooses the nodes

    def use_placement(self, plugin: str, seed: int = 0) -> None:
        """Let placement plugin `plugin` (fgd, best-fit, ...) choose the nodes of each task."""
        from ..placement.placer import Placer

        _check_placement(type(self), plugin)
        self.placer = Placer(plugin, seed)
        self.name = f"{type(self).name}+{plugin}"

    def ledger(self, state: ClusterState) -> Ledger:
        """The round's working copy of free resources, placing through the plugin if any."""
        return Ledger(state, self.placer)

    def schedule(self, state: ClusterState) -> list[Action]:
        raise NotImplementedError

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """A time at which this engine wants a round even if nothing else happens."""
        return None

    def reset(self) -> None:
        """Forget learning state (called when a run starts from scratch)."""

    def forget_cluster(self) -> None:
        """Drop what the engine cached about the cluster in its own earlier rounds. Called
        when it takes over from another engine, which may have changed any job meanwhile."""

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Engine-specific data for the UI's teaching views (prices, probabilities, ...).
        `state`, the cluster now when the caller has it, lets an engine that keeps nothing
        between rounds show its rule applied to the jobs of the moment (`policies.teaching`).
        Times are given in hours (keys ending `_h`) or on the backend clock (`time`)."""
        return self.placer.engine_view() if self.placer is not None else {}


_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(name: str) -> Callable[[type[Policy]], type[Policy]]:
    def deco(cls: type[Policy]) -> type[Policy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def about(engine: type) -> str:
    """The first paragraph of an engine's docstring, or of its module's (most engines are
    described there), on one line."""
    doc = engine.__doc__ or sys.modules[engine.__module__].__doc__ or engine.__module__
    return " ".join(doc.strip().split("\n\n")[0].split())


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def check_engine(name: str, what: str = "") -> None:
    """A one-line `ConfigError` unless `name` can be made: a registered engine, and after a
    `+` a placement plugin that engine takes. `what` (an option such as `--policy`) starts
    the message."""
    _load_all()
    if not isinstance(name, str):  # (None, a number: an AttributeError of `partition`)
        prefix = f"{what}: " if what else ""
        raise ConfigError(f"{prefix}expected an engine name, got {name!r}; available: "
                          f"{', '.join(sorted(_REGISTRY))}")
    base, plus, plugin = name.partition("+")
    if base not in _REGISTRY:
        prefix = f"{what}: " if what else ""
        raise ConfigError(f"{prefix}unknown engine {name!r}; available: "
                          f"{', '.join(sorted(_REGISTRY))}")
    if plus:
        _check_placement(_REGISTRY[base], plugin, f"{what} {name}" if what else "placement")


def _check_placement(engine: type, plugin: str, what: str = "placement") -> None:
    """A one-line `ConfigError` unless `plugin` is a placement plugin and `engine` takes one."""
    from ..placement.plugins import check_plugin

    check_plugin(plugin, what)
    if not getattr(engine, "takes_placement", False):
        raise ConfigError(f"placement: engine {engine.name!r} places by its own rules;"
                          f" plugins work with {', '.join(placement_engines())}")


def make_policy(name: str, **options: Any) -> Policy:
    """Engine `name` with `options`; `placement="fgd"` (or the name `fifo+fgd`, which wins)
    gives it a placement plugin. A one-line `ConfigError` for a name `check_engine` refuses."""
    check_engine(name)
    base, _, plugin = name.partition("+")
    placement = plugin or options.pop("placement", None)
    options.pop("placement", None)
    _check_options(_REGISTRY[base], options)
    policy = _REGISTRY[base](**options)
    if placement:
        policy.use_placement(placement)
    return policy


def _check_options(engine: type, options: dict[str, Any]) -> None:
    """A one-line `ConfigError` naming an option `engine` does not take (a notebook's
    `policy_options={"bogus": 1}` was the constructor's TypeError)."""
    if (unknown := unknown_keyword(engine, options)) is not None:
        key, takes = unknown
        raise ConfigError(f"policy_options: engine {engine.name!r} has no option {key!r};"
                          f" it takes {', '.join(takes) or 'none'}")


def placement_engines() -> list[str]:
    """Engines that take a placement plugin."""
    _load_all()
    return sorted(n for n, cls in _REGISTRY.items() if getattr(cls, "takes_placement", False))


def _load_all() -> None:
    # Engines register themselves on import; import every module in the package once.
    import importlib
    import pkgutil
    from pathlib import Path

    package = __name__.rpartition(".")[0]
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
