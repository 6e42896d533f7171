"""`workbench bench k8s-soak`: many jobs through `workbench schedule` on a local control plane,
with faults, checked from outside (issue #14).

N training jobs (default 1,000) of mixed gang sizes (synthetic workload, 1-8 workers, some with
parameter servers) are created as batch/v1 Jobs at a steady rate while `workbench schedule`
runs the chosen engine against emulated GPU nodes. Optional faults: the apiserver SIGKILLed
every so many seconds (`--kill-apiserver-every`, at most `--kills` times), one node deleted
(and registered again 10 s later, `--delete-node`), and two `workbench schedule
--leader-elect` replicas of which the leader is SIGKILLed mid-run (`--second-replica`; any
replica that exits, e.g. deposed by an outage, is restarted as a Deployment would).

Everything is judged from the cluster, not from the scheduler's word: a job is complete when
one of its Jobs says Complete (a gang's pods end together; a role whose pods a restart deleted
as they succeeded has no success to show); lost when its Jobs failed or vanished; rejected (counted apart) when the
engine refused it, e.g. DL2 refusing all-reduce jobs; stuck when it never completed, or pods of
it still run well after it completed; duplicated when more of its pods succeeded than its Jobs
ask for at the end (a second run), and pods seen on two nodes are counted too. Over-commit
comes from an independent watch (`k8s.local.audit.Auditor`). Binds/s is pods first seen bound
per second of the run; time to recover is, per fault, from the fault to the first bind seen
after it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import argtypes, output


def register(subparsers) -> None:
    p = subparsers.add_parser("k8s-soak", help="N jobs through `workbench schedule` on a local"
                              " cluster with faults: lost, duplicated, stuck, over-commit")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--jobs", type=argtypes.count, default=1000)
    p.add_argument("--engine", default="tiresias",
                   help="engine, a comma-separated list, or `all` (default tiresias)")
    p.add_argument("--nodes", type=argtypes.count, default=8)
    p.add_argument("--gpus-per-node", type=argtypes.count, default=8)
    p.add_argument("--speed", type=argtypes.positive, default=50.0, help="emulated seconds per real second")
    p.add_argument("--work", type=argtypes.positive, default=300.0,
                   help="emulated seconds of training per job at its first size (default 300)")
    p.add_argument("--rate", type=argtypes.positive, default=2.0, help="jobs created per real second")
    p.add_argument("--kill-apiserver-every", type=argtypes.positive, default=None, metavar="SECONDS",
                   help="SIGKILL the apiserver every SECONDS (real) and start it again")
    p.add_argument("--kills", type=argtypes.size, default=2, help="at most this many kills (default 2)")
    p.add_argument("--delete-node", action="store_true",
                   help="delete the busiest node a third of the way in (back 10 s later)")
    p.add_argument("--second-replica", action="store_true",
                   help="two leader-electing schedulers; SIGKILL the leader half-way")
    p.add_argument("--seed", type=argtypes.seed, default=14)
    p.add_argument("--timeout", type=argtypes.positive, default=None,
                   help="real seconds to wait for the last job (default: submission time + 600)")
    p.add_argument("--bin-dir", help="directory with etcd and kube-* binaries")
    p.add_argument("--logs", metavar="DIR",
                   help="keep the schedulers' logs in DIR (default: the cluster's, removed"
                        " with it)")
    p.set_defaults(func=run)


@dataclass
class SoakConfig:
    jobs: int = 1000
    engine: str = "tiresias"
    nodes: int = 8
    gpus_per_node: int = 8
    speed: float = 50.0
    work: float = 300.0
    rate: float = 2.0
    kill_apiserver_every: float | None = None
    kills: int = 2
    delete_node: bool = False
    second_replica: bool = False
    seed: int = 14
    timeout: float | None = None
    down_seconds: float = 2.0  # the apiserver stays dead this long before it is started again
    linger: float = 45.0  # real s a completed job's pods may take to end before 'stuck'
    bin_dir: str | None = None
    logs: str | None = None  # where the schedulers' logs go (default: inside the cluster's)

    @property
    def submit_seconds(self) -> float:
        return self.jobs / self.rate


@dataclass
class Fault:
    what: str
    at: float  # monotonic
    recovered_s: float | None = None  # until the first pod bound after it
    # until the first pod made after it (by a Job's controller or a scheduler's stand-in) was
    # seen: when that is most of `recovered_s`, the scheduler was waiting for pods to bind
    new_pod_s: float | None = None


# ---- the workload ---------------------------------------------------------------------------


def soak_jobs(cfg: SoakConfig, prefix: str = "s"):
    """The jobs: mixed gang sizes up to a node, a fifth with parameter servers, `cfg.work`
    emulated seconds each at their first size."""
    from ..perf import default_perf
    from ..traces import synthetic_workload

    perf = default_perf()
    out = []
    for i, j in enumerate(synthetic_workload(cfg.jobs, arrival_rate=1 / 30,
                                             max_workers=cfg.gpus_per_node, seed=cfg.seed,
                                             ps_jobs=0.2, gpus_per_node=cfg.gpus_per_node)):
        ps = {"a": j.num_ps} if j.num_ps else {}
        rate = perf.iteration_rate(j, {"a": j.initial_workers}, ps)
        out.append(j.with_(name=f"{prefix}-{i:04d}", arrival=0.0, deadline=None,
                           total_work=rate * cfg.work))
    return out


class _Submitter(threading.Thread):
    """Creates each job's batch/v1 Jobs at `rate` per second, retrying through outages."""

    def __init__(self, rest, namespace: str, specs, rate: float) -> None:
        super().__init__(daemon=True, name="soak submitter")
        self.rest, self.namespace, self.specs, self.rate = rest, namespace, specs, rate
        self.created = 0
        self.stop = threading.Event()

    def run(self) -> None:
        from ..k8s.manifests import training_jobs

        start = time.monotonic()
        for i, spec in enumerate(self.specs):
            if self.stop.wait(max(start + i / self.rate - time.monotonic(), 0.0)):
                return
            for manifest in training_jobs(spec, self.namespace):
                self._create(manifest)
            self.created += 1

    def _create(self, manifest: dict) -> None:
        while not self.stop.is_set():
            try:
                self.rest.post(f"/apis/batch/v1/namespaces/{self.namespace}/jobs", manifest)
                return
            except Exception as e:  # noqa: BLE001 - the apiserver may be down: retry
                if getattr(e, "status", None) == 409:
                    return  # created by an earlier try whose answer was lost
                self.stop.wait(0.5)


# ---- the schedulers ------------------------------------------------------------------------


class _Replicas:
    """`workbench schedule` processes (one, or two electing a leader), restarted when they
    exit, as a Deployment's would be."""

    def __init__(self, cluster, namespace: str, engine: str, speed: float, count: int,
                 directory: Path) -> None:
        self.cluster, self.namespace, self.engine, self.speed = cluster, namespace, engine, speed
        self.elect = count > 1
        self.directory = directory
        self.procs: list[subprocess.Popen | None] = [None] * count
        from ..k8s.local.cluster import _free_port

        self.ports = [_free_port() for _ in range(count)]
        self.restarts = 0
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._keep_alive, daemon=True, name="replicas")

    def start(self) -> _Replicas:
        for i in range(len(self.procs)):
            self._launch(i)
        self.thread.start()
        return self

    def _launch(self, i: int) -> None:
        args = [sys.executable, "-m", "workbench", "schedule",
                "--kubeconfig", str(self.cluster.kubeconfig), "--namespace", self.namespace,
                "--policy", self.engine, "--speed", f"{self.speed:g}",
                "--metrics-port", str(self.ports[i]), "--metrics-address", "127.0.0.1",
                "--log-level", "INFO"]
        if self.elect:  # kube-scheduler's durations: shorter ones flap on 2 loaded cores
            args += ["--leader-elect", "--leader-elect-namespace", self.namespace]
        log = open(self.directory / f"schedule-{self.engine}-{i}.log", "a")  # noqa: SIM115
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=_env())
        log.close()

    def _keep_alive(self) -> None:
        while not self.stop_event.wait(0.5):
            with self.lock:
                for i, p in enumerate(self.procs):
                    if p is not None and p.poll() is not None:
                        self.restarts += 1
                        self._launch(i)

    def leader(self) -> int | None:
        for i, port in enumerate(self.ports):
            if scheduler_health(port).startswith("ok: leader" if self.elect else "ok"):
                return i
        return None

    def kill_leader(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.leader()
            if i is not None:
                with self.lock:
                    self.procs[i].send_signal(signal.SIGKILL)
                    self.procs[i].wait(10)
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def log_lines(self) -> list[str]:
        lines = []
        for path in sorted(self.directory.glob(f"schedule-{self.engine}-*.log")):
            lines += path.read_text(errors="replace").splitlines()
        return lines


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def scheduler_health(port: int) -> str:
    """What a `workbench schedule` replica's /healthz says ('' when it does not answer)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()
    except OSError:
        return ""


# ---- what the cluster says ------------------------------------------------------------------


@dataclass
class _Census:
    complete: set[str] = field(default_factory=set)
    lost: dict[str, str] = field(default_factory=dict)  # job -> why
    rejected: dict[str, str] = field(default_factory=dict)  # job -> the engine's reason
    live_pods: dict[str, int] = field(default_factory=dict)  # job -> pods not ended
    succeeded: dict[str, int] = field(default_factory=dict)  # job -> pods that succeeded
    size: dict[str, int] = field(default_factory=dict)  # job -> pods its Jobs ask for now


def _census(rest, namespace: str, specs, created: int) -> _Census | None:
    """Each created job's state as its Jobs and pods show it; None when the API is down."""
    from ..k8s import labels
    from ..k8s.manifests import k8s_name

    try:
        jobs = rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    except Exception:  # noqa: BLE001 - the apiserver is down: ask again later
        return None
    by_job: dict[str, list[dict]] = {}
    for obj in jobs:
        by_job.setdefault(obj["metadata"]["labels"].get(labels.JOB, ""), []).append(obj)
    c = _Census()
    for p in pods:
        job = (p["metadata"].get("labels") or {}).get(labels.JOB, "")
        phase = (p.get("status") or {}).get("phase")
        if phase == "Succeeded":
            c.succeeded[job] = c.succeeded.get(job, 0) + 1
        elif phase != "Failed" and not p["metadata"].get("deletionTimestamp"):
            c.live_pods[job] = c.live_pods.get(job, 0) + 1
    for spec in specs[:created]:
        name = k8s_name(spec.name)
        objs = by_job.get(name, [])
        conds = [{c_["type"] for c_ in (o.get("status") or {}).get("conditions") or []
                  if c_.get("status") == "True"} for o in objs]
        want = 2 if spec.num_ps else 1
        c.size[name] = sum(int(o["spec"].get("parallelism") or 0) for o in objs)
        if any(labels.REJECTED in (o["metadata"].get("annotations") or {}) for o in objs):
            c.rejected[name] = next(
                o["metadata"]["annotations"][labels.REJECTED] for o in objs
                if labels.REJECTED in (o["metadata"].get("annotations") or {}))
        elif any("Failed" in s for s in conds):
            c.lost[name] = "its Job failed"
        elif len(objs) < want:
            c.lost[name] = "its Job is gone"
        elif any("Complete" in s for s in conds):
            # a gang's pods end together when its work is done; a restart that deleted some
            # role's pods as they succeeded leaves that role's Job without a success (the
            # backend then scales it to 0), and pods still live are 'stuck' (`_linger`)
            c.complete.add(name)
    return c


# ---- the run ----------------------------------------------------------------------------------


def soak(cfg: SoakConfig, cluster=None, say: Callable[[str], None] = lambda m: None) -> dict:
    """Run one soak per engine of `cfg.engine` (comma-separated or `all`) on `cluster` (a
    `LocalCluster`; one is started if None); a result dict per engine under 'runs'."""
    from ..errors import ConfigError
    from ..k8s.local.cluster import LocalCluster
    from ..policies import available, check_engine

    engines = available() if cfg.engine == "all" else [e.strip() for e in cfg.engine.split(",")]
    for e in engines:
        check_engine(e)
    if cfg.jobs < 1 or cfg.rate <= 0 or cfg.nodes < 2 or cfg.gpus_per_node < 1:
        raise ConfigError("need --jobs >= 1, --rate > 0, --nodes >= 2, --gpus-per-node >= 1")
    if cfg.logs:  # before a cluster is started for nothing
        try:
            Path(cfg.logs).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--logs {cfg.logs}: cannot make the directory"
                              f" ({e.strerror or e})") from None
    runs = []
    with contextlib.ExitStack() as stack:
        if cluster is None:
            t0 = time.monotonic()
            cluster = stack.enter_context(LocalCluster(
                nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node, cpus=64, mem=256,
                racks=max(1, cfg.nodes // 4), speed=cfg.speed, scheduler=False, api_qps=300,
                bin_dir=cfg.bin_dir, timeout=240))
            say(f"cluster up: {cfg.nodes} emulated nodes x {cfg.gpus_per_node} GPUs"
                f" ({time.monotonic() - t0:.0f} s)")
        for engine in engines:
            say(f"{engine}: {cfg.jobs} jobs ...")
            result = _soak_one(cfg, cluster, engine, say)
            say(f"  {engine}: {_line(result)}")
            runs.append(result)
    return {"config": dict(vars(cfg)), "runs": runs}


def _soak_one(cfg: SoakConfig, cluster, engine: str, say) -> dict:
    """One engine's soak in a namespace of its own (see the module docstring)."""
    from ..k8s.local.audit import Auditor

    namespace = f"soak-{engine}-{os.getpid() % 10000}-{int(time.time()) % 100000}"
    rest = cluster.rest
    rest.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": namespace}})
    specs = soak_jobs(cfg)
    directory = Path(cfg.logs) if cfg.logs else Path(cluster.directory) / "logs"
    timeout = cfg.timeout or cfg.submit_seconds + 600
    with Auditor(cluster.kubeconfig) as audit:
        audit.begin()
        replicas = _Replicas(cluster, namespace, engine, cfg.speed,
                             2 if cfg.second_replica else 1, directory).start()
        submitter = _Submitter(rest, namespace, specs, cfg.rate)
        started = time.monotonic()
        submitter.start()
        faults: list[Fault] = []
        try:
            census = _drive(cfg, cluster, replicas, submitter, specs, namespace, faults,
                            started + timeout, say)
            stuck_after = _linger(cfg, rest, namespace, specs, census, submitter)
            left = _not_done(specs, census)
            stuck_state = _cluster_says(rest, namespace, (left + sorted(stuck_after))[:10])
        finally:
            submitter.stop.set()
            replicas.stop()
        ended = time.monotonic()
        problems = audit.check()
        lines = replicas.log_lines()
    result = _result(cfg, engine, specs, submitter.created, census, stuck_after, audit,
                     problems, faults, replicas.restarts, started, ended, lines)
    result["stuck_state"] = stuck_state
    return result


def _drive(cfg: SoakConfig, cluster, replicas: _Replicas, submitter: _Submitter, specs,
           namespace: str, faults: list[Fault], deadline: float, say) -> _Census:
    """Wait for every job to end, injecting the faults on their schedule; the last census."""
    started = time.monotonic()
    kill_times = [started + cfg.kill_apiserver_every * (k + 1) for k in range(cfg.kills)] \
        if cfg.kill_apiserver_every else []
    node_at = started + cfg.submit_seconds * 0.3 if cfg.delete_node else None
    leader_at = started + cfg.submit_seconds * 0.5 if cfg.second_replica else None
    restore_at = None
    census = _Census()
    last_say = started
    while time.monotonic() < deadline:
        now = time.monotonic()
        if kill_times and now >= kill_times[0]:
            kill_times.pop(0)
            faults.append(Fault("apiserver SIGKILLed", now))
            say(f"  fault: SIGKILL the apiserver ({len(census.complete)} jobs complete)")
            cluster.restart("kube-apiserver", down_seconds=cfg.down_seconds, kill=True)
        if node_at is not None and now >= node_at:
            node_at = None
            node = _busiest_node(cluster.rest, namespace) or cluster.node_specs[0].name
            faults.append(Fault(f"node {node} deleted", time.monotonic()))
            say(f"  fault: delete node {node}")
            with contextlib.suppress(Exception):
                cluster.delete_node(node)
            restore_at = time.monotonic() + 10.0
        if restore_at is not None and now >= restore_at:
            with contextlib.suppress(Exception):
                cluster.restore_nodes()
                restore_at = None
        if leader_at is not None and now >= leader_at:
            leader_at = None
            at = time.monotonic()
            if replicas.kill_leader():
                faults.append(Fault("leader SIGKILLed", at))
                say("  fault: SIGKILL the leading scheduler")
        got = _census(cluster.rest, namespace, specs, submitter.created)
        if got is not None:
            census = got
            done = len(census.complete) + len(census.lost) + len(census.rejected)
            if submitter.created == len(specs) and done == len(specs) and not kill_times \
                    and node_at is None and leader_at is None and restore_at is None:
                break
            if now - last_say > 30:
                last_say = now
                say(f"  {submitter.created} created, {len(census.complete)} complete,"
                    f" {len(census.lost)} lost")
        time.sleep(1.0)
    return census


def _busiest_node(rest, namespace: str) -> str | None:
    try:
        pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    except Exception:  # noqa: BLE001
        return None
    count: dict[str, int] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        if node and (p.get("status") or {}).get("phase") == "Running":
            count[node] = count.get(node, 0) + 1
    return max(count, key=count.get) if count else None


def _linger(cfg: SoakConfig, rest, namespace: str, specs, census: _Census,
            submitter: _Submitter) -> dict[str, int]:
    """Completed jobs whose pods still have not ended `cfg.linger` s later."""
    deadline = time.monotonic() + cfg.linger
    while True:
        got = _census(rest, namespace, specs, submitter.created) or census
        left = {j: n for j, n in got.live_pods.items() if j in got.complete}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


def _not_done(specs, census: _Census) -> list[str]:
    """The jobs neither complete, lost nor rejected (by their Kubernetes names)."""
    from ..k8s.manifests import k8s_name

    names = [k8s_name(s.name) for s in specs]
    return [n for n in names if n not in census.complete and n not in census.lost
            and n not in census.rejected]


def _cluster_says(rest, namespace: str, jobs: list[str]) -> dict[str, dict]:
    """What the API server holds of each stuck job at the end, whatever the scheduler thinks:
    its pods counted by role, phase and bound or not, and its Jobs' counts and conditions."""
    from ..k8s import labels

    try:
        pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        owners = rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    except Exception as e:  # noqa: BLE001 - a diagnosis, not the result
        return {"error": {"reading the cluster": str(e)[:200]}}
    out: dict[str, dict] = {}
    for job in jobs:
        counts: dict[str, int] = {}
        for p in pods:
            meta = p["metadata"]
            if (meta.get("labels") or {}).get(labels.JOB) != job:
                continue
            where = "bound" if p["spec"].get("nodeName") else "unbound"
            gone = " deleting" if meta.get("deletionTimestamp") else ""
            key = f"{(meta.get('labels') or {}).get(labels.ROLE)} {p['status'].get('phase')}" \
                  f" {where}{gone}"
            counts[key] = counts.get(key, 0) + 1
        owned = {}
        for o in owners:
            if o["metadata"]["name"] in (job, f"{job}-ps"):
                st = o.get("status") or {}
                owned[o["metadata"]["name"]] = {
                    "parallelism": o["spec"].get("parallelism"),
                    **{k: st.get(k, 0) for k in ("active", "succeeded", "failed")},
                    "conditions": [c["type"] for c in st.get("conditions") or []
                                   if c.get("status") == "True"]}
        out[job] = {"pods": counts, "jobs": owned}
    return out


def _result(cfg: SoakConfig, engine: str, specs, created: int, census: _Census,
            stuck_after: dict[str, int], audit, problems: list[str], faults: list[Fault],
            restarts: int, started: float, ended: float, lines: list[str]) -> dict:
    from ..k8s.actions import STAND_IN

    not_done = _not_done(specs, census)
    # more pods succeeded than its last size: it ran twice (an engine may resize it, PS too)
    duplicated = sorted(n for n, k in census.succeeded.items() if k > census.size.get(n, k))
    binds = audit.bind_times
    bound, made = sorted(binds), sorted(audit.first_seen.values())
    for f in faults:
        f.recovered_s, f.new_pod_s = _wait_after(bound, f.at), _wait_after(made, f.at)
    seconds = ended - started
    return {
        "engine": engine, "jobs": len(specs), "created": created,
        "complete": len(census.complete), "lost": len(census.lost),
        "rejected": len(census.rejected),
        "duplicated": len(duplicated), "pods_bound_twice": len(audit.bound_twice),
        "stuck": len(not_done) + len(stuck_after),
        "max_overcommit_gpus": audit.worst[2], "max_overcommit_cpus": audit.worst[0],
        "max_overcommit_mem_gib": round(audit.worst[1] / 2**30, 2),
        "binds": len(binds), "binds_per_s": round(len(binds) / seconds, 1) if seconds else None,
        "faults": [{"what": f.what, "recovered_s": f.recovered_s, "new_pod_s": f.new_pod_s,
                    "at_s": round(f.at - started, 1),
                    "at_clock": _clock_time(f.at)} for f in faults],
        "max_recovery_s": max((f.recovered_s or 0.0 for f in faults), default=None),
        "scheduler_restarts": restarts, "seconds": round(seconds, 1),
        "retry_log_lines": sum(1 for line in lines if "Retrying (Retry(" in line),
        "outage_log_lines": sum(1 for line in lines if "workbench.k8s.outage" in line),
        # Jobs whose controller made no pods for long, given them by the scheduler
        "stand_ins": sum(1 for line in lines if STAND_IN in line),
        "lost_jobs": dict(list(census.lost.items())[:10]),
        "rejected_why": sorted(set(census.rejected.values()))[:5], "stuck_jobs": (not_done + sorted(
            stuck_after))[:10], "stuck_why": _last_said(lines, (not_done + sorted(stuck_after))[:10]),
        "duplicated_jobs": duplicated[:10], "audit": problems[:10]}


def _wait_after(times: list[float], at: float) -> float | None:
    """Seconds from `at` to the first of the sorted `times` after it (None: none is)."""
    k = bisect.bisect_right(times, at)
    return round(times[k] - at, 2) if k < len(times) else None


def _last_said(lines: list[str], jobs: list[str]) -> dict[str, str]:
    """The schedulers' latest log line naming each job (where a stuck job was left); the
    replicas' logs are read one after the other, so the latest is the greatest timestamp (the
    lines begin with one)."""
    out: dict[str, str] = {}
    for line in lines:
        for job in jobs:
            if job in line and line[:23] >= out.get(job, "")[:23]:
                out[job] = line.strip()
    return {job: line[-300:] for job, line in out.items()}


def _line(r: dict) -> str:
    return (f"{r['complete']}/{r['jobs']} complete, {r['rejected']} rejected by the engine,"
            f" {r['lost']} lost, {r['duplicated']}"
            f" duplicated, {r['stuck']} stuck, over-commit {r['max_overcommit_gpus']:g} GPUs,"
            f" {r['binds_per_s']} binds/s, recovery {r['max_recovery_s']} s, {r['seconds']} s,"
            f" {r['stand_ins']} Job(s) given pods by the scheduler")


def _clock_time(mono: float) -> str:
    """A monotonic instant as the local wall-clock time the schedulers' logs print."""
    wall = time.time() - (time.monotonic() - mono)
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall % 1 * 1000):03d}"


def run(args) -> int:
    cfg = SoakConfig(jobs=args.jobs, engine=args.engine, nodes=args.nodes,
                     gpus_per_node=args.gpus_per_node, speed=args.speed, work=args.work,
                     rate=args.rate, kill_apiserver_every=args.kill_apiserver_every,
                     kills=args.kills, delete_node=args.delete_node,
                     second_replica=args.second_replica, seed=args.seed, timeout=args.timeout,
                     bin_dir=args.bin_dir, logs=args.logs)
    # progress (and each engine's line as it ends) on stderr with --json: a long soak of
    # several engines otherwise says nothing until the last one ends
    say = (lambda m: print(m, file=sys.stderr if args.json else sys.stdout, flush=True))
    result = soak(cfg, say=say)
    rows = [{k: r[k] for k in ("engine", "jobs", "complete", "rejected", "lost", "duplicated",
                               "stuck", "stand_ins",
                               "max_overcommit_gpus", "binds_per_s", "max_recovery_s",
                               "scheduler_restarts", "seconds")} for r in result["runs"]]
    faults = [f"{f['what']} at +{f['at_s']} s ({f['at_clock']}, as the logs print it): recovered"
              f" in {f['recovered_s']} s (the first pod bound after it; the first pod made after"
              f" it was seen after {f['new_pod_s']} s)" for r in result["runs"] for f in r["faults"]]
    output.emit(result, as_json=args.json, tables={
        f"soak: {cfg.jobs} jobs on {cfg.nodes} emulated {cfg.gpus_per_node}-GPU nodes": rows},
        notes=faults + [f"{r['engine']}: {p}" for r in result["runs"] for p in r["audit"]] +
        [f"{r['engine']}: lost {j}: {why}" for r in result["runs"]
         for j, why in r["lost_jobs"].items()] +
        [f"{r['engine']}: stuck {', '.join(r['stuck_jobs'])}" for r in result["runs"]
         if r["stuck_jobs"]] +
        [f"{r['engine']}: rejected by the engine: {why}" for r in result["runs"]
         for why in r["rejected_why"]] + ["goal: 0 lost, 0 duplicated, 0 stuck, 0 over-commit"])
    bad = any(r["lost"] or r["duplicated"] or r["pods_bound_twice"] or r["stuck"] or r["audit"]
              for r in result["runs"])
    return 1 if bad else 0
