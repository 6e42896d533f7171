"""Cluster presets and parsing of `--cluster` / `--nodes` options."""

from __future__ import annotations

import numbers
import re

from .errors import ConfigError
from .model import Node

MAX_NODES = 100_000  # a bound on what a typo can allocate
# Real nodes hold 8-16 GPUs (an NVL72 rack taken as one node, 72); more is a typo, and the
# simulator keeps per-GPU state (16x99999999 was killed for its memory).
MAX_GPUS_PER_NODE = 1_024
MAX_GPUS = 1_000_000  # in all: 100,000 nodes of 8 fit; 10 million took 0.7 GB and 5 s to start

# name -> (nodes, GPUs per node, CPUs, memory GiB, GPU model, nodes per rack, why)
PRESETS: dict[str, tuple[int, int, int, int, str, int, str]] = {
    "default": (16, 4, 48, 192, "T4", 4,
                "the Pollux OSDI'21 evaluation cluster: 16 nodes x 4 GPUs (g4dn.12xlarge)"),
    "small": (4, 4, 48, 192, "T4", 2, "a 16-GPU cluster for demos and tests"),
    "philly": (50, 8, 64, 512, "P100", 10,
               "400 GPUs: the Philly trace's mean demand is 374 GPUs, so load is ~0.94"),
    "large": (1000, 8, 64, 512, "V100", 40, "1,000 8-GPU nodes for UI and speed tests"),
}


def make_cluster(nodes: int, gpus_per_node: int = 4, cpus: float = 48, mem: float = 192,
                 gpu_model: str = "T4", nodes_per_rack: int = 4, prefix: str = "node",
                 flags: tuple[str, str] = ("--nodes", "--gpus-per-node")) -> list[Node]:
    """`nodes` nodes of `gpus_per_node` GPUs; `flags` name the options that gave the two
    counts in an error."""
    nodes_flag, gpus_flag = flags
    if not 1 <= nodes <= MAX_NODES:
        raise ConfigError(f"{nodes_flag}: expected 1 to {MAX_NODES:,} nodes, got {nodes}")
    if not 0 <= gpus_per_node <= MAX_GPUS_PER_NODE:
        raise ConfigError(f"{gpus_flag}: expected 0 to {MAX_GPUS_PER_NODE:,} GPUs per node,"
                          f" got {gpus_per_node}")
    if nodes * gpus_per_node > MAX_GPUS:
        raise ConfigError(f"{', '.join(dict.fromkeys(flags))}: expected at most {MAX_GPUS:,}"
                          f" GPUs in all, got {nodes:,} nodes x {gpus_per_node:,}")
    width = max(2, len(str(nodes - 1)))
    return [Node(f"{prefix}-{i:0{width}d}", float(cpus), float(mem), int(gpus_per_node), gpu_model,
                 f"rack-{i // max(nodes_per_rack, 1)}") for i in range(nodes)]


def preset(name: str) -> list[Node]:
    if name not in PRESETS:
        raise ConfigError(f"--cluster: unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    n, g, c, m, model, per_rack, _ = PRESETS[name]
    return make_cluster(n, g, c, m, model, per_rack)


def parse_cluster(spec: str | None, nodes: int | None = None, gpus_per_node: int | None = None
                  ) -> list[Node]:
    """`--cluster NAME`, `--cluster NxG` (e.g. 16x4) or `--cluster openb:N` (N nodes of the
    openb GPU node list), optionally overridden by --nodes/--gpus-per-node. A cluster without
    a node or without a GPU is refused: every workload here is of GPU jobs."""
    spec = spec or "default"
    if not isinstance(spec, str):  # (a number: an AttributeError of `partition`)
        raise ConfigError(f"--cluster: expected a preset ({', '.join(PRESETS)}), NxG like 16x4"
                          f" or openb:N, got {spec!r}")
    for flag, count in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral)
                                  or count < 1):  # (2.5: range()'s TypeError; '3': a comparison's)
            raise ConfigError(f"{flag}: expected a positive integer, got {count!r}")
    if spec.partition(":")[0] == "openb":
        return openb_nodes(spec.partition(":")[2] or nodes)
    # a sign too: -1x4 read as "no such preset", not as a count below 1
    if (size := re.fullmatch(r"(-?0*\d+)x(-?0*\d+)", spec)) is not None:
        digits = max(len(size[1].lstrip("-0")), len(size[2].lstrip("-0")))
        if digits > 9:  # (5,000 digits raised int()'s own limit)
            shown = spec if len(spec) <= 40 else f"{spec[:20]}…{spec[-10:]}"
            raise ConfigError(f"--cluster {shown}: too large; expected NxG like 16x4")
        n, g = int(size[1]), int(size[2])
        c, m, model, per_rack = 12 * g, 48 * g, "T4", 4
        if n < 1 or g < 1:
            raise ConfigError(f"--cluster {spec}: expected NxG with at least 1 node and 1 GPU"
                              " per node, like 16x4")
    else:
        if spec not in PRESETS:
            raise ConfigError(f"--cluster: expected a preset ({', '.join(PRESETS)}) or NxG like 16x4,"
                              f" got {spec!r}")
        n, g, c, m, model, per_rack, _ = PRESETS[spec]
    return make_cluster(n if nodes is None else nodes, g if gpus_per_node is None else gpus_per_node,
                        c, m, model, per_rack,
                        flags=("--nodes" if nodes is not None else f"--cluster {spec}",
                               "--gpus-per-node" if gpus_per_node is not None
                               else f"--cluster {spec}"))


def openb_nodes(count: int | str | None = None) -> list[Node]:
    """`count` nodes spread evenly over the openb GPU node list (all when None), so the mix of
    GPU models and sizes is kept."""
    import numpy as np

    from .traces.openb import NODE_FILE, default_data_dir, load_openb_nodes

    nodes = load_openb_nodes(default_data_dir() / NODE_FILE)
    if count is None:
        return nodes
    try:
        n = int(count)
    except ValueError:
        raise ConfigError(f"--cluster openb:N: expected a node count, got {count!r}") from None
    if not 1 <= n <= len(nodes):
        raise ConfigError(f"--cluster openb:N: expected 1..{len(nodes)} nodes, got {n}")
    return [nodes[i] for i in np.linspace(0, len(nodes) - 1, n).round().astype(int)]
