"""The CI soak of issue #14: `workbench bench k8s-soak`, smaller. 200 jobs of mixed gang sizes
through two `workbench schedule --leader-elect` replicas on 6 emulated 8-GPU nodes, with one of
each fault: the apiserver SIGKILLed, a node deleted, the leading scheduler SIGKILLed. Judged
from the cluster: no job lost, duplicated or stuck, no node ever over-committed (the soak's own
auditor, and the module's `no_overcommit` fixture). A few minutes on 2 cores.
"""

from __future__ import annotations

import dataclasses

import pytest
from k8s_helpers import auditor, no_overcommit  # noqa: F401 - fixtures: no test over-commits
from k8s_helpers import need_binaries as _need_binaries

from workbench.bench.k8s_soak import SoakConfig, soak

CONFIG = SoakConfig(jobs=200, engine="tiresias", nodes=6, gpus_per_node=8, speed=50.0,
                    work=120.0, rate=2.0, kill_apiserver_every=40.0, kills=1,
                    delete_node=True, second_replica=True, timeout=400.0)


@pytest.fixture(scope="module")
def cluster():
    from workbench.k8s.local.cluster import LocalCluster

    _need_binaries()
    with LocalCluster(nodes=CONFIG.nodes, gpus_per_node=CONFIG.gpus_per_node, cpus=64, mem=256,
                      speed=CONFIG.speed, scheduler=False, api_qps=300, timeout=240) as c:
        yield c


@pytest.mark.integration
def test_a_soak_with_every_fault_loses_duplicates_strands_and_overcommits_nothing(cluster,
                                                                                  tmp_path):
    logs = tmp_path / "logs"  # kept (`--logs`): the cluster's own directory goes with it
    result = soak(dataclasses.replace(CONFIG, logs=str(logs)), cluster, say=print)["runs"][0]
    summary = {k: result[k] for k in ("complete", "lost", "duplicated", "pods_bound_twice",
                                      "stuck", "max_overcommit_gpus", "binds_per_s", "faults",
                                      "scheduler_restarts", "seconds", "lost_jobs",
                                      "stuck_jobs", "stuck_why", "stuck_state", "stand_ins",
                                      "duplicated_jobs", "audit")}
    print(summary)
    assert sorted(f["what"].split()[0] for f in result["faults"]) == \
        ["apiserver", "leader", "node"], result["faults"]
    assert result["complete"] == CONFIG.jobs, summary
    assert (result["lost"], result["duplicated"], result["stuck"]) == (0, 0, 0), summary
    assert result["pods_bound_twice"] == 0 and result["max_overcommit_gpus"] == 0, summary
    assert not result["audit"], summary
    assert all(f["recovered_s"] is not None for f in result["faults"]), summary
    # jobs arrive throughout: after each fault some pod is made, and the soak says when
    assert all(f["new_pod_s"] is not None for f in result["faults"]), summary
    assert result["retry_log_lines"] == 0, "urllib3 retry lines in the schedulers' logs"
    # each fault says when it happened, on the clock the logs print, to find it there
    assert all(f["at_s"] >= 0 and f["at_clock"].count(":") == 2 for f in result["faults"])
    assert sorted(p.name for p in logs.glob("*.log")) == \
        ["schedule-tiresias-0.log", "schedule-tiresias-1.log"]


def test_a_fault_is_timed_to_the_first_bind_and_the_first_new_pod_after_it():
    from workbench.bench.k8s_soak import _wait_after

    times = [1.0, 2.0, 7.5, 30.25]
    assert _wait_after(times, 2.0) == 5.5  # strictly after
    assert _wait_after(times, 0.0) == 1.0
    assert _wait_after(times, 30.25) is None and _wait_after([], 3.0) is None


def test_a_stuck_job_is_reported_with_the_latest_line_the_schedulers_logged_about_it():
    from workbench.bench.k8s_soak import _last_said

    replica_0 = ["2026-11-25 03:05:00,000 INFO a: s-0001: Preempted (resize)",
                 "2026-11-25 03:09:00,000 INFO a: s-0002: Scheduled"]
    replica_1 = ["2026-11-25 03:07:00,000 INFO a: s-0001: RestartTimeout (late)"]
    said = _last_said(replica_0 + replica_1, ["s-0001", "s-0002", "s-0003"])
    assert said == {"s-0001": replica_1[0], "s-0002": replica_0[1]}


def test_a_logs_directory_that_cannot_be_made_is_one_line_before_any_cluster(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "workbench", "bench", "k8s-soak", "--jobs", "2",
                           "--logs", str(blocker / "logs")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"workbench: error: --logs {blocker / 'logs'}: cannot make the directory (Not a directory)"]
    assert "cluster up" not in proc.stdout
