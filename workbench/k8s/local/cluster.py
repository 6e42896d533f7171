"""A real local Kubernetes control plane, started in seconds from the binaries `build` made.

`LocalCluster` starts etcd, kube-apiserver (TLS on 127.0.0.1, static tokens), then
kube-controller-manager and kube-scheduler, writes a kubeconfig, registers emulated GPU
nodes and starts the node emulator (`workbench.k8s.local.emulator`) as a background process.
Unless `operators=False`, it also installs the PyTorchJob, TFJob and JobSet CRDs (`crds`) and
starts their minimal operator (`workbench.k8s.local.operator`), another background process.
Every process it starts is recorded in `DIR/pids.json`, and `down(DIR)` stops exactly those.

Measured here (2 shared cores, load 5-9): `up` with 3 nodes 15-17 s (apiserver ready 8 s),
250 nodes 18 s; idle RSS etcd 47 MB, apiserver 320 MB, controller-manager 88 MB, scheduler
42 MB, emulator 59 MB; 1,000 GPU pods bound by kube-scheduler (--api-qps 500) and Running on
250 emulated nodes 16 s after the first was created.

    with LocalCluster(nodes=3, gpus_per_node=8) as cluster:
        core = kubernetes.client.CoreV1Api(cluster.api_client)
        ...   # cluster.kubeconfig is the admin kubeconfig path
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from ...errors import ConfigError
from ...model import Node
from .. import labels
from .build import ClusterError, Progress, cache_dir, find_binaries, last_line
from .certs import write_pki


def default_cluster_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_CLUSTER_DIR") or cache_dir() / "cluster")


def _quiet(_: str) -> None:
    pass

# ---- running the control plane --------------------------------------------------------------


def emulated_nodes(count: int, gpus_per_node: int = 8, cpus: float = 64, mem: float = 256,
                   racks: int = 1, gpu_model: str = "V100", prefix: str = "gpu-node") -> list[Node]:
    """`count` identical nodes in contiguous blocks over `racks` racks (the same `Node`s
    the simulator uses, named gpu-node-000, ...)."""
    if count < 0 or gpus_per_node < 0 or cpus <= 0 or mem <= 0 or racks < 1:
        raise ConfigError("need nodes >= 0, gpus-per-node >= 0, cpus > 0, mem > 0, racks >= 1")
    per_rack = -(-count // racks) if count else 1
    return [Node(name=f"{prefix}-{i:03d}", cpus=cpus, mem=mem, gpus=gpus_per_node,
                 gpu_model=gpu_model, rack=f"rack-{i // per_rack}") for i in range(count)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None if gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _alive(entry: dict) -> bool:
    start = _proc_start(entry["pid"])
    return start is not None and start == entry.get("start")


def _https_ok(url: str, token: str | None = None, timeout: float = 2.0) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def kubeconfig_dict(server: str, ca_pem: bytes, token: str, user: str = "admin") -> dict:
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "workbench-local", "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "workbench-local",
                      "context": {"cluster": "workbench-local", "user": user}}],
        "current-context": "workbench-local",
    }


@dataclass(frozen=True)
class _Credentials:
    """What `start` wrote for the components: certificate and key paths, kubeconfig paths."""

    pki: dict[str, Path]
    kubeconfigs: dict[str, Path]


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1, with
    emulated GPU nodes kept alive by the node emulator. A context manager: `with
    LocalCluster(nodes=3) as c:` starts it (c.kubeconfig, c.api_client) and stops it after.

    `directory` holds certificates, etcd data, logs, kubeconfigs and `pids.json`; without
    one, a temporary directory is used and removed on stop. Ports are free ones picked at
    start, so several clusters can run side by side.
    """

    def __init__(self, nodes: int = 3, gpus_per_node: int = 8, cpus: float = 64,
                 mem: float = 256, racks: int = 1, gpu_model: str = "V100",
                 directory: str | Path | None = None, bin_dir: str | Path | None = None,
                 speed: float = 1.0, api_qps: float | None = None, scheduler: bool = True,
                 controller_manager: bool = True, emulator: bool = True,
                 operators: bool = True, timeout: float = 90.0,
                 progress: Progress = _quiet) -> None:
        self.node_specs = emulated_nodes(nodes, gpus_per_node, cpus, mem, racks, gpu_model)
        if speed <= 0:
            raise ConfigError(f"--speed must be > 0, got {speed}")
        self._temporary = directory is None
        self.directory = Path(directory) if directory else None
        self.bin_dir = bin_dir
        self.speed = speed
        self.api_qps = api_qps
        self.want_scheduler = scheduler
        self.want_controller_manager = controller_manager
        self.want_emulator = emulator
        self.want_operators = operators
        self.timeout = timeout
        self.progress = progress
        self.state: dict = {}
        self._popen: dict[str, subprocess.Popen] = {}
        self._api_client = None
        self._rest = None
        self.timings: dict[str, float] = {}

    # -- paths --
    @property
    def kubeconfig(self) -> Path:
        assert self.directory is not None
        return self.directory / "kubeconfig"

    @property
    def operator_ready_file(self) -> Path:
        """Written by the training operator once its watches have listed."""
        assert self.directory is not None
        return self.directory / "training-operator.ready"

    @property
    def pids_file(self) -> Path:
        assert self.directory is not None
        return self.directory / "pids.json"

    @property
    def server(self) -> str:
        return self.state["server"]

    @property
    def api_client(self):
        """A `kubernetes.client.ApiClient` for the admin user (created on first use)."""
        if self._api_client is None:
            from ..rest import client_from_kubeconfig
            self._api_client = client_from_kubeconfig(self.kubeconfig)
        return self._api_client

    @property
    def rest(self):
        if self._rest is None:
            from ..rest import Rest
            self._rest = Rest(self.api_client)
        return self._rest

    # -- lifecycle --
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Check the binaries, write certificates, tokens and kubeconfigs, start etcd and
        kube-apiserver, then the CRDs and their operator, the controllers, the nodes and the
        emulator; wait until healthy. On any failure every process started so far is
        stopped."""
        t0 = self._t0 = time.monotonic()
        binaries = self._binaries()
        d = self._fresh_directory()
        files = self._write_credentials(d)
        try:
            self._start_etcd(binaries["etcd"], d)
            self._start_apiserver(binaries["kube-apiserver"], d, files)
            if self.want_operators:
                self._start_operator(files)
            if self.want_controller_manager:
                self._start_controller_manager(binaries["kube-controller-manager"], files)
            if self.want_scheduler:
                self._start_scheduler(binaries["kube-scheduler"], files)
            self._register_nodes()
            if self.want_emulator:
                self._launch("node-emulator", [
                    sys.executable, "-m", "workbench.k8s.local.emulator",
                    f"--kubeconfig={files.kubeconfigs['emulator']}", f"--speed={self.speed:g}"])
            self._wait_healthy(self.state["ports"])
        except BaseException:
            self.stop(remove=False)
            raise
        self.timings["up"] = time.monotonic() - t0
        self.progress(f"cluster up in {self.timings['up']:.1f} s")
        return self

    # -- the steps of `start` --
    def _binaries(self) -> dict[str, Path | None]:
        """The binaries this cluster runs; one error naming every one that is missing."""
        if self.bin_dir is not None and not Path(self.bin_dir).is_dir():
            raise ConfigError(f"--bin-dir {self.bin_dir}: no such directory")
        binaries = find_binaries(self.bin_dir)
        needed = ["etcd", "kube-apiserver"]
        if self.want_controller_manager:
            needed.append("kube-controller-manager")
        if self.want_scheduler:
            needed.append("kube-scheduler")
        missing = [n for n in needed if binaries[n] is None]
        if missing:
            raise ClusterError(f"cluster up: no {', '.join(missing)} binary; run `workbench"
                               " cluster build` or pass --bin-dir (or set KUBEBUILDER_ASSETS)")
        return binaries

    def _fresh_directory(self) -> Path:
        """The state directory (a temporary one if none was given), refused while another
        cluster runs in it, without the etcd data and logs of an earlier one."""
        if self.directory is None:
            stopped = reap_orphans()
            if stopped:
                self.progress(f"stopped {len(stopped)} temporary cluster(s) whose process had"
                              f" died: {', '.join(stopped)}")
            self.directory = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX))
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        existing = read_state(d)
        if existing and any(_alive(e) for e in existing.get("components", {}).values()):
            raise ClusterError(f"cluster up: a cluster is already running in {d};"
                               f" run `workbench cluster down --dir {d}` first")
        for sub in ("etcd", "logs"):
            shutil.rmtree(d / sub, ignore_errors=True)
        (d / "logs").mkdir()
        return d

    def _write_credentials(self, d: Path) -> _Credentials:
        """Certificates, one static token per client, free ports and a kubeconfig per client;
        starts `self.state` (what `pids.json` records)."""
        pki = write_pki(d / "pki")
        tokens = {who: secrets.token_hex(16) for who in
                  ("admin", "controller-manager", "scheduler", "emulator", "operator")}
        (d / "tokens.csv").write_text(
            f'{tokens["admin"]},admin,admin,"system:masters"\n'
            f'{tokens["controller-manager"]},system:kube-controller-manager,'
            "system:kube-controller-manager\n"
            f'{tokens["scheduler"]},system:kube-scheduler,system:kube-scheduler\n'
            f'{tokens["emulator"]},workbench:node-emulator,workbench:node-emulator,'
            '"system:masters"\n'
            f'{tokens["operator"]},workbench:training-operator,workbench:training-operator,'
            '"system:masters"\n')
        (d / "tokens.csv").chmod(0o600)
        ports = {name: _free_port() for name in
                 ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        ca_pem = pki["ca.crt"].read_bytes()
        kubeconfigs = {}
        for who, user in (("admin", "admin"), ("controller-manager", "controller-manager"),
                          ("scheduler", "scheduler"), ("emulator", "node-emulator"),
                          ("operator", "training-operator")):
            path = d / ("kubeconfig" if who == "admin" else f"{who}.kubeconfig")
            path.write_text(json.dumps(kubeconfig_dict(server, ca_pem, tokens[who], user),
                                       indent=2))
            path.chmod(0o600)
            kubeconfigs[who] = path
        self.state = {"server": server, "ports": ports, "components": {},
                      "kubeconfig": str(self.kubeconfig), "directory": str(d),
                      "nodes": len(self.node_specs), "started": time.time(),
                      "speed": self.speed}
        if self._temporary:  # lives only as long as this process: see `reap_orphans`
            self.state["owner"] = {"pid": os.getpid(), "start": _proc_start(os.getpid())}
        self._tokens = tokens
        self._args: dict[str, list[str]] = {}
        return _Credentials(pki, kubeconfigs)

    def _start_etcd(self, binary: Path, d: Path) -> None:
        ports = self.state["ports"]
        self._launch("etcd", [
            str(binary), "--name=default", f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ports['etcd-client']}",
            f"--advertise-client-urls=http://127.0.0.1:{ports['etcd-client']}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-cluster=default=http://127.0.0.1:{ports['etcd-peer']}",
            "--logger=zap", "--log-level=warn", "--quota-backend-bytes=8589934592"])

    def _start_apiserver(self, binary: Path, d: Path, files: _Credentials) -> None:
        """Start kube-apiserver and wait until it answers /readyz."""
        ports, pki, server = self.state["ports"], files.pki, self.server
        self._launch("kube-apiserver", [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd-client']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}", "--insecure-port=0",
            f"--cert-dir={d / 'pki'}",
            f"--tls-cert-file={pki['apiserver.crt']}",
            f"--tls-private-key-file={pki['apiserver.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",  # 127.0.0.1 is not a valid endpoint IP
            "--allow-privileged=true", "--profiling=false",
            "--max-requests-inflight=800", "--max-mutating-requests-inflight=400"])
        self._wait("kube-apiserver /readyz",
                   lambda: _https_ok(f"{server}/readyz", self._tokens["admin"]),
                   ("etcd", "kube-apiserver"))
        self.timings["apiserver_ready"] = time.monotonic() - self._t0
        self.progress(f"kube-apiserver ready at {server}"
                      f" ({self.timings['apiserver_ready']:.1f} s)")

    def _start_operator(self, files: _Credentials) -> None:
        """Create the CRDs (their Established wait is one of the health checks) and start
        the operator, whose start-up then overlaps the controllers'."""
        from .crds import create_crds

        create_crds(self.rest)
        self.operator_ready_file.unlink(missing_ok=True)
        self._launch("training-operator", [
            sys.executable, "-m", "workbench.k8s.local.operator",
            f"--kubeconfig={files.kubeconfigs['operator']}",
            f"--ready-file={self.operator_ready_file}"])

    def _qps_flags(self) -> list[str]:
        if not self.api_qps:
            return []
        return [f"--kube-api-qps={self.api_qps:g}", f"--kube-api-burst={int(self.api_qps * 2)}"]

    def _start_controller_manager(self, binary: Path, files: _Credentials) -> None:
        pki = files.pki
        self._launch("kube-controller-manager", [
            str(binary),
            f"--kubeconfig={files.kubeconfigs['controller-manager']}",
            "--leader-elect=false", "--port=0", "--bind-address=127.0.0.1",
            f"--secure-port={self.state['ports']['controller-manager']}",
            f"--service-account-private-key-file={pki['sa.key']}",
            f"--root-ca-file={pki['ca.crt']}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={pki['ca.crt']}",
            f"--cluster-signing-key-file={pki['ca.key']}",
            "--profiling=false", *self._qps_flags()])

    def _start_scheduler(self, binary: Path, files: _Credentials) -> None:
        self._launch("kube-scheduler", [
            str(binary),
            f"--kubeconfig={files.kubeconfigs['scheduler']}",
            "--leader-elect=false", "--port=0", "--bind-address=127.0.0.1",
            f"--secure-port={self.state['ports']['scheduler']}", "--profiling=false",
            *self._qps_flags()])

    def _launch(self, name: str, args: list[str]) -> None:
        assert self.directory is not None
        log = self.directory / "logs" / f"{name}.log"
        env = dict(os.environ)
        if name in ("node-emulator", "training-operator"):
            # the emulator and the operator are this package: the child imports the same copy
            pkg_root = str(Path(__file__).resolve().parents[3])
            env["PYTHONPATH"] = os.pathsep.join(
                [pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        with open(log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                    cwd=self.directory)
        self._popen[name] = proc
        self._args[name] = args
        self.state["components"][name] = {"pid": proc.pid, "start": _proc_start(proc.pid),
                                          "log": str(log), "args": args}
        self._save()

    def _save(self) -> None:
        tmp = self.pids_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.pids_file)

    def _check_alive(self, names) -> None:
        for name in names:
            entry = self.state["components"].get(name)
            if entry and not _alive(entry):
                proc = self._popen.get(name)
                code = proc.poll() if proc else None
                raise ClusterError(f"cluster up: {name} exited (code {code}):"
                                   f" {last_line(Path(entry['log']))}; log {entry['log']}")

    def _wait(self, what: str, ready: Callable[[], bool], watch=(), timeout=None) -> None:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            self._check_alive(watch or self.state["components"].keys())
            if ready():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster up: timed out waiting for {what}; logs in"
                                   f" {self.directory / 'logs'}")
            time.sleep(0.1)

    def _register_nodes(self) -> None:
        from .emulator import node_manifest
        rest = self.rest
        for node in self.node_specs:
            try:
                rest.post("/api/v1/nodes", node_manifest(node, speed=self.speed))
            except Exception as e:  # noqa: BLE001 - re-raised with context
                if getattr(e, "status", None) != 409:
                    raise ClusterError(f"cluster up: could not register node {node.name}: {e}")

    def _wait_healthy(self, ports: dict[str, int]) -> None:
        checks: list[tuple[str, Callable[[], bool]]] = []
        if self.want_controller_manager:
            checks.append(("kube-controller-manager /healthz", lambda: _https_ok(
                f"https://127.0.0.1:{ports['controller-manager']}/healthz")))
            checks.append(("the default service account's token", self._default_sa_ready))
        if self.want_scheduler:
            checks.append(("kube-scheduler /healthz", lambda: _https_ok(
                f"https://127.0.0.1:{ports['scheduler']}/healthz")))
        if self.want_emulator and self.node_specs:
            checks.append(("emulated nodes Ready", self._nodes_ready))
        if self.want_operators:
            checks.append(("CRDs established", self._crds_served))
            checks.append(("training operator watching", self.operator_ready_file.exists))
        for what, check in checks:
            self._wait(what, check)
            self.timings[what] = time.monotonic() - self._t0
            self.progress(f"{what} ({self.timings[what]:.1f} s)")

    def _crds_served(self) -> bool:
        from ..kinds import CUSTOM_KINDS
        from .crds import served

        return all(served(self.rest, k) for k in CUSTOM_KINDS)

    def _default_sa_ready(self) -> bool:
        try:
            sa = self.rest.get("/api/v1/namespaces/default/serviceaccounts/default")
        except Exception:  # noqa: BLE001 - not there yet
            return False
        return bool(sa.get("secrets"))

    def _nodes_ready(self) -> bool:
        try:
            items = self.rest.get("/api/v1/nodes", labelSelector=f"{labels.EMULATED}=true")
        except Exception:  # noqa: BLE001 - apiserver busy
            return False
        ready = 0
        for node in items["items"]:
            conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
            taints = {t["key"] for t in node.get("spec", {}).get("taints", []) or []}
            if conds.get("Ready") == "True" and labels.NOT_READY_TAINT not in taints:
                ready += 1
        return ready >= len(self.node_specs)

    def restart(self, name: str, down_seconds: float = 0.0, grace: float = 3.0,
                kill: bool = False) -> None:
        """Stop one component (SIGTERM, SIGKILL after `grace` s: an apiserver with clients
        watching takes long to drain; `kill`: SIGKILL at once, a crash) and start it again
        with the same arguments after `down_seconds`."""
        entry = self.state["components"].get(name)
        if entry is None:
            raise ConfigError(f"no component {name!r}; have {sorted(self.state['components'])}")
        if kill and _alive(entry):
            with contextlib.suppress(ProcessLookupError):
                os.kill(entry["pid"], signal.SIGKILL)
        _stop_entries({name: entry}, self._popen, timeout=grace)
        time.sleep(down_seconds)
        self._launch(name, entry["args"])
        if name == "kube-apiserver":
            self._wait("kube-apiserver /readyz",
                       lambda: _https_ok(f"{self.server}/readyz", self._tokens["admin"]))

    def delete_node(self, name: str) -> None:
        """Delete an emulated node's Node object (a fault: its pods lose their node)."""
        self.rest.delete(f"/api/v1/nodes/{name}")

    def restore_nodes(self) -> None:
        """Register again every emulated node that was deleted (the emulator keeps it Ready)."""
        self._register_nodes()

    def stop(self, remove: bool | None = None) -> None:
        """Stop every process this cluster started; remove a temporary directory."""
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
            self._rest = None
        if self.directory is None:
            return
        _stop_entries(self.state.get("components", {}), self._popen)
        self._popen.clear()
        if self.pids_file.exists():
            self.pids_file.unlink()
        if remove if remove is not None else self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def processes(self) -> dict[str, dict]:
        return component_status(self.state)


def _stop_entries(entries: dict[str, dict], popen: dict[str, subprocess.Popen] | None = None,
                  timeout: float = 10.0) -> list[str]:
    """SIGTERM each live process (in reverse start order), SIGKILL what is left after
    `timeout`; returns the names that were running."""
    popen = popen or {}
    running = [(n, e) for n, e in reversed(list(entries.items())) if _alive(e)]
    for _, e in running:
        try:
            os.kill(e["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for name, e in running:
        while _alive(e) and time.monotonic() < deadline:
            if name in popen and popen[name].poll() is not None:
                break
            time.sleep(0.05)
        if _alive(e):
            try:
                os.kill(e["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    for name, _ in running:  # reap our own children
        if name in popen:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen[name].wait(timeout=5)
    return [n for n, _ in running]


TEMPORARY_PREFIX = "workbench-cluster-"


def reap_orphans() -> list[str]:
    """Stop the temporary clusters whose owning process has died without stopping them (a
    SIGKILL, an OOM kill, a notebook kernel killed): their etcd, apiserver and controllers
    would run on for good, unseen. A cluster started by `workbench cluster up` has no owner
    and is never touched. Returns the directories removed."""
    reaped = []
    for pids in sorted(Path(tempfile.gettempdir()).glob(f"{TEMPORARY_PREFIX}*/pids.json")):
        try:
            state = json.loads(pids.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being written, or not ours to judge
        owner = state.get("owner")
        if not isinstance(owner, dict) or _alive(owner):
            continue
        _stop_entries(state.get("components", {}))
        shutil.rmtree(pids.parent, ignore_errors=True)
        reaped.append(str(pids.parent))
    return reaped


def read_state(directory: str | Path) -> dict | None:
    path = Path(directory) / "pids.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ClusterError(f"{path}: unreadable ({e}); stop its processes by hand and delete it")


def component_status(state: dict) -> dict[str, dict]:
    out = {}
    for name, e in state.get("components", {}).items():
        alive = _alive(e)
        out[name] = {"pid": e["pid"], "running": alive,
                     "rss_mb": _rss_mb(e["pid"]) if alive else None, "log": e["log"]}
    return out


def up(directory: str | Path | None = None, **options) -> LocalCluster:
    """Start a local cluster that outlives this process (the `workbench cluster up` command)."""
    cluster = LocalCluster(directory=directory or default_cluster_dir(), **options)
    return cluster.start()


def down(directory: str | Path | None = None) -> list[str]:
    """Stop every process recorded in DIR/pids.json; returns the names that were running."""
    d = Path(directory or default_cluster_dir())
    state = read_state(d)
    if state is None:
        return []
    stopped = _stop_entries(state.get("components", {}))
    (d / "pids.json").unlink(missing_ok=True)
    return stopped


def status(directory: str | Path | None = None) -> dict | None:
    d = Path(directory or default_cluster_dir())
    state = read_state(d)
    if state is None:
        return None
    return {"directory": str(d), "server": state.get("server"),
            "kubeconfig": state.get("kubeconfig"), "nodes": state.get("nodes"),
            "started": state.get("started"), "components": component_status(state)}
