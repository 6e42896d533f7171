"""Loader for the Alibaba PAI GPU-cluster trace "openb" (FGD, USENIX ATC '23).

Origin: alibaba/clusterdata, cluster-trace-gpu-v2023. Use for research or study, citing
"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent" (ATC '23). The files are not shipped with the package: callers pass a path.

- node lists: `sn,cpu_milli,memory_mib,gpu,model`
- pod lists: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time]` (the multigpu variants stop after gpu_milli).
  `gpu_milli` < 1000 with `num_gpu` = 1 is a GPU-sharing pod; `gpu_spec` lists the allowed
  GPU models separated by `|` (empty = any).

Every bad cell raises one `InputError` naming file, line and column.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..model import Node

MILLI = 1000
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time",
                "scheduled_time")
DEFAULT_DIR = Path("..") / "shared" / "data" / "openb"
NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"


def default_data_dir(how: str = "pass --data DIR (or --pods/--nodes PATH)") -> Path:
    """Where the openb files are (`find_data_dir`); InputError saying `how` to name them
    (the `openb` command's options by default)."""
    path = find_data_dir()
    if path is None:
        raise InputError(
            f"openb data not found (${DATA_ENV}, or {DEFAULT_DIR} from here or a directory "
            f"above): {how}; the trace is not shipped with "
            "the package (license), get it from alibaba/clusterdata cluster-trace-gpu-v2023",
            file=str(DEFAULT_DIR))
    return path


DATA_ENV = "WORKBENCH_OPENB_DATA"


def find_data_dir() -> Path | None:
    """Where the openb files are, or None: the directory named by $WORKBENCH_OPENB_DATA, else
    `../shared/data/openb` seen from the working directory or any directory above it (so a
    notebook running in `notebooks/` finds the same data as the CLI run from the repository)."""
    named = os.environ.get(DATA_ENV)
    if named:
        return Path(named) if Path(named).is_dir() else None
    here = Path.cwd().resolve()
    for base in (here, *here.parents):
        path = (base / DEFAULT_DIR).resolve()
        if path.is_dir():
            return path
    return None


def resolve_pod_list(spec: str | os.PathLike | None, data_dir: Path | None = None,
                     how: str | None = None) -> Path:
    """A pod-list path from a path, or a variant name like `default` or `gpushare40`; `how`:
    what to tell a user whose data is not found (`default_data_dir`)."""
    if spec is not None and (os.sep in str(spec) or str(spec).endswith(".csv")):
        return Path(spec)
    data_dir = data_dir or (default_data_dir(how) if how else default_data_dir())
    name = spec or "default"
    path = data_dir / f"openb_pod_list_{name}.csv"
    if not path.exists():
        known = sorted(p.name[len("openb_pod_list_"):-4]
                       for p in data_dir.glob("openb_pod_list_*.csv"))
        raise InputError(f"no pod list {name!r}; known: {', '.join(known) or 'none'}",
                         file=str(path))
    return path


def _rows(path: str | os.PathLike, required: tuple[str, ...], optional: tuple[str, ...] = ()):
    """Header and the data rows with their physical line numbers."""
    path = str(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows, lines, header = _read_csv(f, path, required)
    except FileNotFoundError:
        raise InputError("no such file", file=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a CSV file", file=path) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text, expected a CSV file", file=path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=path) from None
    if not rows:
        raise InputError("no data rows", file=path, line=2)
    cols = {name: [r[i].strip() for r in rows] for i, name in enumerate(header)
            if name in required or name in optional}
    return path, cols, np.asarray(lines)


def _read_csv(f, path: str, required: tuple[str, ...]):
    reader = csv.reader(f)
    try:
        header = next(reader, None)
        if header is None:
            raise InputError("empty file, expected a CSV header", file=path, line=1)
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}; header is "
                             f"{','.join(header)}", file=path, line=1)
        rows, lines = [], []
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise InputError(f"expected {len(header)} fields, got {len(row)}",
                                 file=path, line=reader.line_num)
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as e:
        raise InputError(f"bad CSV: {e}", file=path, line=reader.line_num) from None
    return rows, lines, header


def _ints(path: str, cols: dict, name: str, lines: np.ndarray, *, lo: int = 0,
          hi: int | None = None, what: str = "a non-negative integer") -> np.ndarray:
    cells = cols[name]
    try:
        return _check_range(np.array(cells, dtype=np.int64), path, cells, name, lines, lo, hi,
                            what)
    except ValueError:
        pass
    for i, cell in enumerate(cells):  # slow path only to find the bad cell
        try:
            int(cell)
        except ValueError:
            raise InputError(f"expected {what}, got {cell!r}", file=path, line=int(lines[i]),
                             column=name) from None
    raise AssertionError("unreachable")


def _check_range(values, path, cells, name, lines, lo, hi, what) -> np.ndarray:
    bad = values < lo
    if hi is not None:
        bad |= values > hi
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"expected {what}, got {cells[i]!r}", file=path, line=int(lines[i]),
                         column=name)
    return values


def _times(path: str, cols: dict, name: str, lines: np.ndarray) -> np.ndarray:
    if name not in cols:
        return np.full(len(lines), np.nan)
    cells = cols[name]
    out = np.full(len(cells), np.nan)
    for i, cell in enumerate(cells):
        if cell:
            try:
                out[i] = float(cell)
            except ValueError:
                raise InputError(f"expected a time in seconds or nothing, got {cell!r}",
                                 file=path, line=int(lines[i]), column=name) from None
    return out


def load_openb_nodes(path: str | os.PathLike) -> list[Node]:
    """Nodes of an openb node list: cores from cpu_milli, GiB from memory_mib."""
    path, cols, lines = _rows(path, NODE_COLUMNS)
    cpu = _ints(path, cols, "cpu_milli", lines, lo=1, what="a positive integer (milli-CPU)")
    mem = _ints(path, cols, "memory_mib", lines, lo=1, what="a positive integer (MiB)")
    gpus = _ints(path, cols, "gpu", lines, what="a non-negative GPU count")
    names, models = cols["sn"], cols["model"]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name:
            raise InputError("expected a node name, got ''", file=path, line=int(lines[i]),
                             column="sn")
        if name in seen:
            raise InputError(f"duplicate node name {name!r} (first on line {seen[name]})",
                             file=path, line=int(lines[i]), column="sn")
        seen[name] = int(lines[i])
        if gpus[i] > 0 and not models[i]:
            raise InputError("expected a GPU model for a node with GPUs, got ''", file=path,
                             line=int(lines[i]), column="model")
    return [Node(name=names[i], cpus=int(cpu[i]) / MILLI, mem=int(mem[i]) / 1024, gpus=int(gpus[i]),
                 gpu_model=models[i] if gpus[i] > 0 else "")
            for i in range(len(names))]


def load_openb_pods(path: str | os.PathLike) -> pd.DataFrame:
    """An openb pod list as a compact table, one row per pod.

    Columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli (per GPU, 0 for CPU-only pods),
    gpu_spec ('' = any model, else models joined by '|'), qos, pod_phase, creation_time,
    deletion_time, scheduled_time (seconds, NaN where absent). `df.attrs['path']` and
    `df.attrs['lines']` keep the origin of each row for messages.
    """
    path, cols, lines = _rows(path, POD_REQUIRED, POD_OPTIONAL)
    cpu = _ints(path, cols, "cpu_milli", lines, what="a non-negative integer (milli-CPU)")
    mem = _ints(path, cols, "memory_mib", lines, what="a non-negative integer (MiB)")
    num_gpu = _ints(path, cols, "num_gpu", lines, what="a non-negative GPU count")
    gpu_milli = _ints(path, cols, "gpu_milli", lines, hi=MILLI,
                      what="an integer from 0 to 1000 (milli-GPU per GPU)")
    # Consistency: a GPU pod asks for some GPU; a sharing pod asks for one GPU only.
    for bad, column, what in (
        ((num_gpu == 0) & (gpu_milli != 0), "gpu_milli", "0 for a pod with num_gpu 0"),
        ((num_gpu > 0) & (gpu_milli == 0), "gpu_milli", "1 to 1000 for a pod with GPUs"),
        ((num_gpu > 1) & (gpu_milli < MILLI), "gpu_milli",
         "1000 for a multi-GPU pod (only single-GPU pods share a GPU)"),
    ):
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"expected {what}, got {cols[column][i]!r}", file=path,
                             line=int(lines[i]), column=column)
    n = len(lines)
    spec = cols.get("gpu_spec", [""] * n)
    for i, s in enumerate(spec):
        if s and any(not part.strip() for part in s.split("|")):
            raise InputError(f"expected GPU models separated by '|', got {s!r}", file=path,
                             line=int(lines[i]), column="gpu_spec")
    df = pd.DataFrame({
        "name": cols["name"],
        "cpu_milli": cpu,
        "memory_mib": mem,
        "num_gpu": num_gpu.astype(np.int16),
        "gpu_milli": gpu_milli.astype(np.int16),
        "gpu_spec": pd.Categorical(spec),
        "qos": pd.Categorical(cols.get("qos", [""] * n)),
        "pod_phase": pd.Categorical(cols.get("pod_phase", [""] * n)),
        "creation_time": _times(path, cols, "creation_time", lines),
        "deletion_time": _times(path, cols, "deletion_time", lines),
        "scheduled_time": _times(path, cols, "scheduled_time", lines),
    })
    df.attrs["path"] = path
    df.attrs["lines"] = lines
    return df


def allowed_models(gpu_spec: str) -> frozenset[str] | None:
    """The GPU models a `gpu_spec` cell allows; None means any."""
    return frozenset(p.strip() for p in gpu_spec.split("|")) if gpu_spec else None


def requested_gpus(pods: pd.DataFrame) -> np.ndarray:
    """GPUs each pod requests (fractions for sharing pods)."""
    return pods["num_gpu"].to_numpy(np.float64) * pods["gpu_milli"].to_numpy(np.float64) / MILLI
