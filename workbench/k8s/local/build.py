"""Building the local control plane's binaries once, from source.

`build()` fetches Debian's `kubernetes` source package (v1.20.2 with vendored dependencies)
through a private apt source list, replaces the vendored `reflect2` (v1.0.1 crashes the
apiserver under Go >= 1.18), builds kube-apiserver, kube-controller-manager and
kube-scheduler offline, and takes etcd from Debian's `etcd-server`. Everything lives under
`~/.cache/workbench/` (or `$WORKBENCH_CACHE`); a second call finds the binaries and returns.
Binaries the user already has are used instead: `bin_dir=`, `$KUBEBUILDER_ASSETS`, `$PATH`.

Measured here (2 shared cores, load 5-9): cold build 22 min wall / 7.3 min CPU (about 5 min
wall on an idle machine), warm `build` 1-2 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError, WorkbenchError

K8S_SOURCE_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
K8S_SOURCE_DIR = "kubernetes-1.20.5+really1.20.2"
K8S_VERSION = "v1.20.2"
REFLECT2_PACKAGE = "golang-github-modern-go-reflect2-dev"
ETCD_PACKAGE = "etcd-server"
BUILD_TOOLS = {"go": "golang-go", "rsync": "rsync", "make": "make", "dpkg-source": "dpkg-dev"}
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
BUILT = COMPONENTS[1:]
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEBIAN_MIRRORS = (("http://deb.debian.org/debian", "bookworm"),
                  ("http://deb.debian.org/debian-security", "bookworm-security"))

Progress = Callable[[str], None]


class ClusterError(WorkbenchError):
    """A control-plane step failed; the message says which and what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "workbench")


# ---- finding and building the binaries ----------------------------------------------------


def find_binaries(bin_dir: str | Path | None = None) -> dict[str, Path | None]:
    """Each control-plane binary's path, looked for in `bin_dir`, `$KUBEBUILDER_ASSETS`, the
    workbench cache and `$PATH`, in that order (None where it is nowhere)."""
    dirs = [Path(d) for d in (bin_dir, os.environ.get("KUBEBUILDER_ASSETS"),
                              cache_dir() / "k8s" / "bin") if d]
    found: dict[str, Path | None] = {}
    for name in COMPONENTS:
        found[name] = None
        for d in dirs:
            if (d / name).is_file() and os.access(d / name, os.X_OK):
                found[name] = d / name
                break
        else:
            on_path = shutil.which(name)
            found[name] = Path(on_path) if on_path else None
    return found


@dataclass
class _Step:
    number: int
    total: int
    name: str


class Builder:
    """Fetches and builds the control plane into the cache; each step is skipped when done."""

    def __init__(self, progress: Progress = print, jobs: int = 2) -> None:
        self.progress = progress
        self.jobs = max(1, jobs)
        self.root = cache_dir()
        self.k8s = self.root / "k8s"
        self.apt = self.root / "apt"
        self.bin = self.k8s / "bin"
        self.logs = self.k8s / "logs"
        self.src = self.k8s / "src" / K8S_SOURCE_DIR
        self.unpacked = self.k8s / "root"
        self.step = _Step(0, 7, "")

    # -- helpers --
    def _begin(self, name: str) -> None:
        self.step = _Step(self.step.number + 1, self.step.total, name)
        self.progress(f"[{self.step.number}/{self.step.total}] {name}")

    def _fail(self, what: str, hint: str) -> ClusterError:
        return ClusterError(f"cluster build: step {self.step.number} ({self.step.name}) failed:"
                            f" {what}; {hint}")

    def _run(self, cmd: list[str], log: str, hint: str, cwd: Path | None = None,
             env: dict | None = None, watch: bool = False) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / log
        with open(log_path, "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            start = last = time.monotonic()
            try:
                while proc.poll() is None:
                    time.sleep(0.5)
                    if watch and time.monotonic() - last >= 30:
                        last = time.monotonic()
                        self.progress(f"      ... {last - start:.0f} s"
                                      f" {last_line(log_path, skip='$ ')}")
            except BaseException:
                proc.terminate()
                proc.wait()
                raise
        if proc.returncode != 0:
            tail = _first_error(log_path) or last_line(log_path)
            raise self._fail(f"`{' '.join(cmd[:3])} ...` exited {proc.returncode}"
                             f" ({tail}); log {log_path}", hint)

    def _apt_options(self) -> list[str]:
        a = self.apt
        return ["-o", f"Dir::Etc::SourceList={a / 'sources.list'}",
                "-o", "Dir::Etc::SourceParts=/dev/null",
                "-o", f"Dir::State::Lists={a / 'lists'}",
                "-o", f"Dir::Cache::Archives={a / 'archives'}",
                "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
                "-o", "APT::Sandbox::User=root",
                # another apt (an upgrade, a browser install) may hold dpkg's lock: wait for it
                "-o", "DPkg::Lock::Timeout=600", "-q"]

    # -- steps --
    def build(self) -> dict[str, Path]:
        started = time.monotonic()
        if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
            raise ClusterError("cluster build: needs apt-get and dpkg (a Debian-like system);"
                               " or point --bin-dir / KUBEBUILDER_ASSETS at kube-apiserver,"
                               " kube-controller-manager, kube-scheduler and etcd binaries")
        self.apt_lists()
        self.tools()
        self.source()
        self.debs()
        self.patch_reflect2()
        self.make()
        paths = self.install()
        self.progress(f"built in {time.monotonic() - started:.0f} s: binaries in {self.bin}")
        return paths

    def apt_lists(self) -> None:
        self._begin("private apt source list")
        (self.apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.apt / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        lines = []
        for kind in ("deb", "deb-src"):
            for url, suite in DEBIAN_MIRRORS:
                lines.append(f"{kind} [signed-by={DEBIAN_KEYRING}] {url} {suite} main")
        sources = self.apt / "sources.list"
        text = "\n".join(lines) + "\n"
        fresh = any((self.apt / "lists").glob("*Sources*")) and sources.exists() and \
            sources.read_text() == text and \
            time.time() - (self.apt / "lists").stat().st_mtime < 7 * 86400
        if fresh:
            self.progress("      up to date")
            return
        sources.write_text(text)
        self._run(["apt-get", *self._apt_options(), "update"], "apt-update.log",
                  "check that Debian's package archive is reachable")

    def tools(self) -> None:
        self._begin("build tools (golang-go, rsync, make, dpkg-dev)")
        missing = [pkg for tool, pkg in BUILD_TOOLS.items() if _tool(tool) is None]
        if not missing:
            self.progress(f"      found: {_go_version()}")
            return
        if os.geteuid() != 0:
            raise self._fail(f"missing {', '.join(missing)}",
                             f"install them (sudo apt-get install {' '.join(missing)}) and retry")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        self._run(["apt-get", *self._apt_options(), "install", "-y", "--no-install-recommends",
                   *missing], "apt-install.log",
                  f"install {' '.join(missing)} by hand and retry", env=env)

    def source(self) -> None:
        self._begin(f"kubernetes source {K8S_SOURCE_VERSION}")
        marker = self.src / ".workbench-source-ok"
        if marker.exists():
            self.progress(f"      found {self.src}")
            return
        parent = self.src.parent
        if self.src.exists():
            shutil.rmtree(self.src)
        parent.mkdir(parents=True, exist_ok=True)
        self._run(["apt-get", *self._apt_options(), "source", "--only-source",
                   f"kubernetes={K8S_SOURCE_VERSION}"], "apt-source.log",
                  "check the apt log; `rm -rf ~/.cache/workbench/apt` forces a fresh list",
                  cwd=parent)
        if not (self.src / "Makefile").exists():
            raise self._fail(f"{self.src} has no Makefile after unpacking", "see apt-source.log")
        marker.write_text(K8S_SOURCE_VERSION + "\n")

    def debs(self) -> None:
        self._begin(f"{REFLECT2_PACKAGE} and {ETCD_PACKAGE} (unpacked, no service started)")
        marker = self.unpacked / ".workbench-debs-ok"
        if marker.exists() and (self.unpacked / "usr" / "bin" / "etcd").exists():
            self.progress("      found")
            return
        debs = self.k8s / "debs"
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        self._run(["apt-get", *self._apt_options(), "download", REFLECT2_PACKAGE, ETCD_PACKAGE],
                  "apt-download.log", "check the apt log", cwd=debs)
        shutil.rmtree(self.unpacked, ignore_errors=True)
        self.unpacked.mkdir(parents=True)
        for deb in sorted(debs.glob("*.deb")):
            self._run(["dpkg", "-x", str(deb), str(self.unpacked)], "dpkg-x.log",
                      f"{deb.name} may be damaged: delete {debs} and retry")
        marker.write_text("ok\n")

    def patch_reflect2(self) -> None:
        self._begin("replace vendored reflect2 v1.0.1 with 1.0.2 (Go >= 1.18 fix)")
        vendored = self.src / "vendor" / "github.com" / "modern-go" / "reflect2"
        marker = vendored / ".workbench-reflect2-1.0.2"
        if marker.exists():
            self.progress("      already replaced")
            return
        fixed = self.unpacked / "usr/share/gocode/src/github.com/modern-go/reflect2"
        new_files = sorted(list(fixed.glob("*.go")) + list(fixed.glob("*.s")))
        if not new_files:
            raise self._fail(f"no reflect2 sources in {fixed}", f"delete {self.unpacked}, retry")
        for old in list(vendored.glob("*.go")) + list(vendored.glob("*.s")):
            old.unlink()
        for f in new_files:
            shutil.copy2(f, vendored / f.name)
        marker.write_text("replaced by Debian's golang-github-modern-go-reflect2-dev\n")

    def make(self) -> None:
        self._begin("make kube-apiserver kube-controller-manager kube-scheduler (~5 min cold)")
        out = self._output_bin()
        marker = self.src / ".workbench-built"
        if marker.exists() and all((out / b).exists() for b in BUILT):
            self.progress("      already built")
            return
        go = _tool("go")
        # GOFLAGS stays unset: hack/lib/golang.sh pastes it into -tags. The tree's go.mod
        # (go 1.15) with vendor/modules.txt makes Go use the vendored code by itself.
        env = dict(os.environ, CGO_ENABLED="0", GOPROXY="off",
                   KUBE_GIT_VERSION=K8S_VERSION, KUBE_GIT_MAJOR="1", KUBE_GIT_MINOR="20",
                   KUBE_GIT_TREE_STATE="clean", GOMAXPROCS=str(self.jobs),
                   PATH=f"{Path(go).parent}:{os.environ.get('PATH', '')}" if go else
                   os.environ.get("PATH", ""))
        env.setdefault("HOME", str(Path.home()))
        env.pop("GOFLAGS", None)
        self._run(["make", f"WHAT={' '.join('cmd/' + b for b in BUILT)}"], "make.log",
                  "read the log; a clean retry: rm -rf ~/.cache/workbench/k8s/src",
                  cwd=self.src, env=env, watch=True)
        marker.write_text(K8S_VERSION + "\n")

    def _output_bin(self) -> Path:
        return self.src / "_output" / "local" / "bin" / "linux" / "amd64"

    def install(self) -> dict[str, Path]:
        self._begin(f"install into {self.bin}")
        self.bin.mkdir(parents=True, exist_ok=True)
        sources = {b: self._output_bin() / b for b in BUILT}
        sources["etcd"] = self.unpacked / "usr" / "bin" / "etcd"
        paths = {}
        for name, src in sources.items():
            tmp = self.bin / f".{name}.tmp"
            shutil.copy2(src, tmp)
            tmp.chmod(0o755)
            tmp.replace(self.bin / name)
            paths[name] = self.bin / name
        version = subprocess.run([str(paths["kube-apiserver"]), "--version"],
                                 capture_output=True, text=True, check=False).stdout.strip()
        self.progress(f"      {version}")
        return paths


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and name == "go" and Path("/usr/lib/go/bin/go").exists():
        found = "/usr/lib/go/bin/go"
    return found


def _go_version() -> str:
    go = _tool("go")
    if not go:
        return "no go"
    return subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout.strip()


def last_line(path: Path, skip: str | None = None) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln and not (skip and ln.startswith(skip))]
    return lines[-1][:160] if lines else ""


_ERROR_MARKS = ("go: ", "error:", "Error:", "E: ", "fatal", "cannot ", "undefined:")


def _first_error(path: Path) -> str | None:
    """The first line of a build log that looks like the cause of a failure."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if any(m in line for m in _ERROR_MARKS) and not line.startswith("$ "):
                    return line.strip()[:200]
    except OSError:
        pass
    return None


def clean_sources(progress: Progress = print) -> None:
    """Delete the source tree, its Go cache and the downloaded packages (~2.3 GB); the
    installed binaries stay. A later rebuild fetches and compiles everything again."""
    k8s = cache_dir() / "k8s"
    for sub in ("src", "debs", "root"):
        if (k8s / sub).exists():
            shutil.rmtree(k8s / sub)
            progress(f"removed {k8s / sub}")


def build(bin_dir: str | Path | None = None, *, force: bool = False, progress: Progress = print,
          jobs: int = 2, clean: bool = False) -> dict[str, Path]:
    """Make sure etcd, kube-apiserver, kube-controller-manager and kube-scheduler exist; build
    what is missing into the cache (`clean`: delete the sources after). Returns the paths."""
    if bin_dir is not None and not Path(bin_dir).is_dir():
        raise ConfigError(f"--bin-dir {bin_dir}: no such directory")
    found = find_binaries(bin_dir)
    if not force and all(found.values()):
        for name, path in found.items():
            progress(f"{name}: {path}")
        progress("control plane binaries present; nothing to build")
        if clean:
            clean_sources(progress)
        return {k: v for k, v in found.items() if v}
    missing = [k for k, v in found.items() if not v] if not force else list(COMPONENTS)
    progress(f"building {', '.join(missing)} into {cache_dir() / 'k8s' / 'bin'}")
    built = Builder(progress, jobs).build()
    if clean:
        clean_sources(progress)
    found = find_binaries(bin_dir)
    return {k: (v or built[k]) for k, v in found.items()}
