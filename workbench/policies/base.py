"""The policy interface and the registry of engines by name."""

from __future__ import annotations

from typing import Any, Callable

from ..model import Action, ClusterState


class Policy:
    """Sees a ClusterState, returns Actions. Keeps only its own learning state."""

    name: str = "policy"
    round_interval: float = 60.0  # seconds between scheduling rounds
    # Engines whose decisions change with time alone (aging, deadlines) want every round;
    # the others are only asked when something happened (arrival, completion, fault).
    needs_every_round: bool = False
    # Engines whose decisions don't depend on a job finishing its checkpoint-restart delay
    # set this, so the controller skips the rounds those moments would cost on long traces.
    quiet_restarts: bool = False

    def schedule(self, state: ClusterState) -> list[Action]:
        raise NotImplementedError

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """A time at which this engine wants a round even if nothing else happens."""
        return None

    def reset(self) -> None:
        """Forget learning state (called when a run starts from scratch)."""

    def engine_view(self) -> dict[str, Any]:
        """Engine-specific data for the UI's teaching views (prices, probabilities, ...)."""
        return {}


_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(name: str) -> Callable[[type[Policy]], type[Policy]]:
    def deco(cls: type[Policy]) -> type[Policy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def make_policy(name: str, **options: Any) -> Policy:
    _load_all()
    if name not in _REGISTRY:
        raise KeyError(f"unknown policy {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](**options)


def _load_all() -> None:
    # Engines register themselves on import; import every module in the package once.
    import importlib
    import pkgutil

    from .. import policies

    for info in pkgutil.iter_modules(policies.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{policies.__name__}.{info.name}")
