"""Derive the compact traces shipped in `workbench/traces/data/` from the shared real data.

    python tools/derive_traces.py [--data ../shared/data] [--out workbench/traces/data]

Writes
- `philly.csv.gz`: every job of the Philly trace (82,247 rows), sorted by submission time
  (stable, ties keep file order), as `arrival,duration,num_gpus,vc`: arrival = whole seconds
  since the first submission, duration = seconds the job ran, num_gpus as logged, vc the
  virtual cluster (Philly's tenant) as logged. `gpu_time` (= duration × num_gpus exactly in
  the source) is dropped.
- `pollux-workload-1.csv`: Pollux workload 1 (160 jobs) unchanged, with an attribution header.

Both files open with `#` lines giving origin and licence; the loaders skip them.
"""

from __future__ import annotations

import argparse
import gzip
import io
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

PHILLY_HEADER = """\
# Microsoft Philly GPU cluster trace, one row per job, derived by workbench tools/derive_traces.py
# Source: Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
#   Workloads", USENIX ATC '19 (https://github.com/msr-fiddle/philly-traces), CC BY 4.0,
#   as extracted per job in the Pollux OSDI '21 artifact (petuum/adaptdl osdi21-artifact c793c70).
# Changes: sorted by submission; timestamp -> arrival (s since {origin}); cluster -> vc; gpu_time dropped.
"""

POLLUX_HEADER = """\
# Pollux workload {name} (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for
#   Goodput-Optimized Deep Learning", OSDI '21), petuum/adaptdl osdi21-artifact c793c70,
#   Apache-2.0. Jobs sampled from the Microsoft Philly trace (ATC '19, CC BY 4.0). Unchanged.
"""


def derive_philly(src: Path, out: Path) -> pd.DataFrame:
    trace = pd.read_csv(src, dtype={"timestamp": str})
    stamps = pd.to_datetime(trace["timestamp"], format="%Y-%m-%d %H:%M:%S")
    order = stamps.argsort(kind="stable")
    trace, stamps = trace.iloc[order], stamps.iloc[order]
    origin = stamps.iloc[0]
    compact = pd.DataFrame({
        "arrival": ((stamps - origin).dt.total_seconds()).astype("int64").to_numpy(),
        "duration": trace["duration"].round().astype("int64").to_numpy(),
        "num_gpus": trace["num_gpus"].astype("int64").to_numpy(),
        "vc": trace["cluster"].astype(str).to_numpy(),
    })
    assert (compact["duration"] == trace["duration"].to_numpy()).all(), "non-integer durations"
    body = io.StringIO()
    body.write(PHILLY_HEADER.format(origin=origin.strftime("%Y-%m-%d %H:%M:%S")))
    compact.to_csv(body, index=False, lineterminator="\n")
    # mtime=0: the same input gives byte-identical output
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                               compresslevel=9, filename="") as f:
        f.write(body.getvalue().encode())
    return compact


def derive_pollux(src: Path, out: Path) -> None:
    name = src.stem.replace("workload-", "")
    out.write_text(POLLUX_HEADER.format(name=name) + src.read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "workbench" / "traces" / "data")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    philly = derive_philly(args.data / "philly" / "philly.csv", args.out / "philly.csv.gz")
    derive_pollux(args.data / "pollux" / "workloads" / "workload-1.csv",
                  args.out / "pollux-workload-1.csv")
    size = (args.out / "philly.csv.gz").stat().st_size
    print(f"philly.csv.gz: {len(philly)} jobs, {size / 1e6:.2f} MB")
    print("pollux-workload-1.csv: written")


if __name__ == "__main__":
    main()
