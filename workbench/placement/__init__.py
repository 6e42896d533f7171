"""Where tasks go: the layer below the engines (`policies`) and above the model and traces.

- `state`: `Task` and `PlacementState` (free resources per node and per GPU, integer units),
  the target workload of a set of jobs, the placement view of a `ClusterState`.
- `fragmentation`: the FGD fragmentation measure against a target workload.
- `plugins`: the placement plugins (random, dot-product, gpu-clustering, gpu-packing,
  best-fit, fgd), each choosing a node and GPUs for one task.
- `placer`: a plugin working inside an engine, fed from the engine's ledger.
- `ledger`: an engine's working copy of free resources within one round; gang placement.
- `replay` and `curves`: the FGD paper's openb replay protocol and its curves.

Nothing here imports `policies`; `metrics` and the engines import from here.
"""
