"""#18 item 2: what-if forks on an executor (a process pool, as a sweep's) give the runs they
give one after another on the caller's thread, and leave the live run where it was."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from workbench.metrics import run_metrics
from workbench.session import load_jobs, load_nodes, simulate
from workbench.whatif import run_forks


def test_forks_on_a_process_pool_match_the_serial_forks():
    live = simulate(load_nodes("default", "small"), load_jobs("default"), "fifo")
    live.run(until=3 * 3600)
    now, rounds = live.backend.now, live.rounds
    engines = {"fifo": "fifo", "tiresias": "tiresias", "drf": "drf"}
    here = run_forks(live.backend, engines)
    with ProcessPoolExecutor(2) as pool:
        there = run_forks(live.backend, engines, executor=pool)
    assert [r.label for r in there] == list(engines) and all(r.complete for r in there)
    for a, b in zip(here, there):
        assert run_metrics(a.controller.backend) == run_metrics(b.controller.backend)
        assert len(a.controller.recorder.decisions) == len(b.controller.recorder.decisions)
    assert (live.backend.now, live.rounds) == (now, rounds)
