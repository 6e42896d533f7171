"""The run's decision log (`control.DecisionLog`) and the replay's collector setting."""

from __future__ import annotations

import copy
import gc
import pickle

from workbench.clusters import preset
from workbench.control import Decision, DecisionLog
from workbench.experiment import fewer_young_collections, run_policy
from workbench.traces import default_workload


def _two() -> list[Decision]:
    return [Decision(1.0, "fifo", "Place", "a", "started", True, "node-00×1"),
            Decision(2.0, "fifo", "Wait", "b", "behind a", True)]


def test_the_log_reads_as_a_list_of_decisions():
    log = DecisionLog()
    for d in _two():
        log.append(d)
    log.record(3.0, "fifo", "Suspend", "a", "preempted", False, "")
    assert len(log) == 3 and log
    assert log[0] == _two()[0] and isinstance(log[0], Decision) and log[-1].action == "Suspend"
    assert log[1:] == [_two()[1], Decision(3.0, "fifo", "Suspend", "a", "preempted", False)]
    assert [d.job for d in log] == ["a", "b", "a"]
    assert [d.time for d in reversed(log)] == [3.0, 2.0, 1.0]
    assert log == _two() + [Decision(3.0, "fifo", "Suspend", "a", "preempted", False)]
    assert log != _two() and DecisionLog() == [] and not DecisionLog()
    assert pickle.loads(pickle.dumps(log)) == log and copy.deepcopy(log) == log
    del log[:2]
    assert [d.job for d in log] == ["a"] and log[0].reason == "preempted"


def test_a_run_records_rows_the_collector_stops_scanning():
    run = run_policy(preset("default"), default_workload()[:40], "fifo")
    log = run.controller.recorder.decisions
    assert len(log) > 40 and {d.action for d in log} >= {"Place"}
    gc.collect()
    # a Decision (a tuple subclass) would stay tracked; the log's plain rows do not
    assert not any(gc.is_tracked(row) for row in log._rows)
    assert gc.is_tracked(log[0])


def test_the_collector_thresholds_come_back_after_a_run():
    before = gc.get_threshold()
    with fewer_young_collections(12_345):
        assert gc.get_threshold() == (max(12_345, before[0]), *before[1:])
    assert gc.get_threshold() == before
    run_policy(preset("default"), default_workload()[:10], "fifo")
    assert gc.get_threshold() == before
