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


def test_shared_pool_workers_end_when_the_app_process_is_killed():
    """A served app stopped by a signal never shuts its shared pool down; its workers must
    not live on as orphans (browser test runs left five pairs each)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = ("import os, time\n"
              "from workbench.sweeps.executors import shared_pool\n"
              "pool = shared_pool(2)\n"
              "print(' '.join(str(p) for p in {pool.submit(os.getpid).result() for _ in"
              " range(4)}), flush=True)\n"
              "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert workers, "the pool ran nothing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    deadline = time.monotonic() + 15
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in workers), "pool workers outlived their parent"


def test_a_prepared_preview_runs_once_and_its_last_side_on_the_fork_gives_the_pooled_result():
    """Run serially, the preview's last side runs on the fork itself (no copy); it gives what
    the pool (every side on its own unpickled copy) gives, and a second run is refused."""
    import pytest

    from workbench.policies import make_policy
    from workbench.whatif import prepare_preview

    live = simulate(load_nodes("default", "small"), load_jobs("default"), "tiresias")
    live.run(until=3 * 3600)
    here = prepare_preview(live.backend, live.policy, make_policy("fifo"), 4 * 3600.0)
    serial = here()
    with pytest.raises(RuntimeError, match="runs once"):
        here()
    with ProcessPoolExecutor(2) as pool:
        pooled = prepare_preview(live.backend, live.policy, make_policy("fifo"), 4 * 3600.0,
                                 pool)()
    for a, b in ((serial.table, pooled.table), (serial.changes, pooled.changes),
                 (serial.decisions, pooled.decisions)):
        assert a.to_csv() == b.to_csv()
    assert not serial.decisions.empty


def test_a_pooled_preview_leaves_the_settled_jobs_behind_and_answers_as_the_serial_one():
    """A preview's sides read no job finished before the live run's last round, so the fork
    sent to the pool leaves those out (`sim.engine.pickled_without_settled`: at Philly scale
    54 of 67.5 MB); what it sends keeps the jobs finished since that round (the current
    engine's side owes a round for them, `Controller.carry_on`), nor the jobs arriving after
    the preview's horizon but the first; the run itself is left whole, and whole-run metrics
    of such a copy are refused."""
    import pickle

    import pytest

    from workbench.policies import make_policy
    from workbench.whatif import fork_blob, own_copy, prepare_preview

    live = simulate(load_nodes("default", "default"), load_jobs("default"), "optimus")
    base = live.backend
    # a fork time after a completion the live run has not rounded for yet
    t = 2 * 3600.0
    while not any(j.finish_time > live.last_round for j in base.finished):
        t += 37.0
        live.run(until=t)
        assert t < 24 * 3600, "no completion between two of optimus's rounds"
    since = [j.spec.name for j in base.finished if j.finish_time > live.last_round]
    whole = (dict(base.jobs), list(base.finished), base.pending_arrivals())

    sent = own_copy(fork_blob(base, live.last_round))
    assert (dict(base.jobs), list(base.finished), base.pending_arrivals()) == whole
    assert [j.spec.name for j in sent.finished] == since
    assert set(sent.jobs) == set(base.active) | set(since)
    assert sent.pending_arrivals() == base.pending_arrivals()
    assert sent.finished_left_out == len(base.finished) - len(since) > 0
    assert len(fork_blob(base, live.last_round)) < len(pickle.dumps(base))
    with pytest.raises(ValueError, match="left out"):
        run_metrics(sent)
    # to a horizon: the jobs arriving by then and the first after it (the next event), no more
    until = base.now + 4 * 3600.0
    to_come = base._specs[base._next_arrival:]
    due = sum(s.arrival <= until for s in to_come)
    assert 0 < due + 1 < len(to_come), "the horizon leaves no arrival out"
    near = own_copy(fork_blob(base, live.last_round, until))
    assert [s.name for s in near._specs] == [s.name for s in to_come[:due + 1]]
    assert near.arrivals_left_out == len(to_come) - due - 1
    assert near.next_event_time() == sent.next_event_time()
    with pytest.raises(ValueError, match="to come"):
        run_metrics(near)

    def preview(pool=None):
        return prepare_preview(base, live.policy, make_policy("tiresias"), 4 * 3600.0, pool,
                               last_round=live.last_round)()

    serial = preview()
    with ProcessPoolExecutor(2) as pool:
        pooled = preview(pool)
    for a, b in ((serial.table, pooled.table), (serial.changes, pooled.changes),
                 (serial.decisions, pooled.decisions)):
        assert a.to_csv() == b.to_csv()
    assert serial.table.completed.sum() > 0 and not serial.decisions.empty


def test_a_preview_whose_engine_cannot_be_pickled_runs_here_from_the_pickled_present():
    """Given a pool, a preview pickles the present at once (no fork first); an engine that
    cannot be sent (a plugin holding a lambda) then runs here, each side on its own copy
    unpickled from those bytes, and answers as a serial preview on a fork."""
    from workbench.policies import make_policy
    from workbench.whatif import picklable, prepare_preview

    live = simulate(load_nodes("default", "small"), load_jobs("default"), "tiresias")
    live.run(until=3 * 3600)

    def candidate():
        engine = make_policy("fifo")
        engine.on_the_side = lambda: None  # pickle refuses it
        return engine

    assert not picklable(candidate())

    serial = prepare_preview(live.backend, live.policy, candidate(), 4 * 3600.0,
                             last_round=live.last_round)()
    with ProcessPoolExecutor(1) as pool:
        here = prepare_preview(live.backend, live.policy, candidate(), 4 * 3600.0, pool,
                               last_round=live.last_round)
        assert pool.submit(len, "ab").result() == 2
        answer = here()
    for part in ("table", "changes", "decisions"):
        assert getattr(answer, part).to_csv() == getattr(serial, part).to_csv(), part
    assert not serial.decisions.empty
