"""Derive `workbench/perf/data/pollux_goodput.json`: what the goodput model (`perf/goodput.py`)
needs beyond `pollux.json`, from the measured Pollux profiles.

Run from the repository root (needs the shared data folder, which users do not have):

    python tools/derive_goodput.py [--data /work/shared/data] [--out workbench/perf/data]

Per application:
- `epoch_ends`: the artifact's progress at the end of each epoch, the least `progress` of that
  row over the validation files (osdi21-artifact simulator/applications.py `get_progress`),
  one value per epoch up to the app's max epochs. Progress is counted in iterations at the
  smallest measured batch, weighted by statistical efficiency.
- `min_local_bsz`: the least `local_bsz` of placements.csv (the artifact's default
  `min_local_bsz`, applications.py).
Floats are rounded to 9 significant digits.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

# osdi21-artifact simulator/applications.py APPLICATIONS: max_epochs per application
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80,
              "yolov3": 50}


def derive(profiles: Path) -> dict:
    apps = {}
    for app, epochs in MAX_EPOCHS.items():
        columns = []
        for path in sorted((profiles / app).glob("validation-*.csv")):
            with open(path, newline="") as f:
                columns.append([float(r["progress"]) for r in csv.DictReader(f)])
        with open(profiles / app / "placements.csv", newline="") as f:
            min_local = min(int(float(r["local_bsz"])) for r in csv.DictReader(f))
        ends = [float(f"{min(c[e] for c in columns):.9g}") for e in range(epochs)]
        apps[app] = {"epoch_ends": ends, "min_local_bsz": min_local}
    return apps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--out", default="workbench/perf/data")
    args = ap.parse_args()
    out = {"notice": "Derived from the Pollux OSDI'21 artifact (petuum/adaptdl, branch"
                     " osdi21-artifact, commit c793c70, simulator/traces), Copyright Petuum,"
                     " Inc., Apache License 2.0. Derived by tools/derive_goodput.py.",
           "license": "Apache-2.0",
           "apps": derive(Path(args.data) / "pollux" / "profiles")}
    path = Path(args.out) / "pollux_goodput.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
