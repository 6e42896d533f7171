"""`workbench serve`: the app in a browser, on the embedded simulated cluster and a real trace.

    workbench serve                              # http://127.0.0.1:5006/, Pollux workload 1
    workbench serve --trace philly --cluster philly --policy tiresias
    workbench serve --address 0.0.0.0 --shared   # one cluster for everyone; controls need the token

Each browser session gets its own simulation, unless `--shared`: then every session watches
one cluster, as every session does a real one (`--kubeconfig`). Changing a real cluster always
needs the access token in the URL (`?token=...`, printed at start), and so does changing a
shared simulation when serving on a non-loopback address (or with `--token`); without it a
session is read-only. A session's own private simulation is always under its own control, but
connecting it to a Kubernetes cluster from the controls (Backend) needs the token too: one is
always made, and printed as the operator's URL.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import sys

from ..clusters import PRESETS
from ..errors import ConfigError, check_number

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(address: str) -> bool:
    if address in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


TOKEN_HEADER = "X-Workbench-Token"
# The token a launcher gave this server (JupyterLab's proxy, which adds it to each request as
# TOKEN_HEADER): in the environment, not in argv, which every local user may read.
TOKEN_ENV = "WORKBENCH_TOKEN"


def token_matches(session_args: dict, token: str, headers: dict | None = None) -> bool:
    """Whether a session presented `token`: in its URL (`?token=`) or in TOKEN_HEADER (behind
    JupyterLab's proxy the URL's token is Jupyter's own)."""
    given = session_args.get("token", [b""])[0]
    if isinstance(given, bytes):
        given = given.decode("utf-8", "replace")
    header = (headers or {}).get(TOKEN_HEADER, "")
    return bool(token) and (hmac.compare_digest(given, token) or
                            hmac.compare_digest(header, token))


def session_locked(*, token: str | None, given_ok: bool, shared: bool, simulated: bool) -> bool:
    """Whether a session may only watch: the cluster is shared or real, a token is required,
    and the session did not present it."""
    if not token:
        return False
    return (shared or not simulated) and not given_ok


def check_listen(address: str, port: int) -> None:
    """One line now, before the URLs are printed, if the server could not listen on
    `address`:`port` (a traceback came after URLs that led to whatever held the port): bind
    as the server will (tornado's `bind_sockets`) and let go at once."""
    import errno

    from tornado.netutil import bind_sockets

    try:
        for listening in bind_sockets(port, address):
            listening.close()
    except (socket.gaierror, UnicodeError):  # 999.1.1.1, nosuchhost.invalid, a 300-char name
        raise ConfigError(f"--address {address}: not a name or address of this machine"
                          ) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port}: already in use on {address}") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--address {address}: not an address of this machine") from None
        raise ConfigError(f"--address {address} --port {port}: cannot listen ({e.strerror})"
                          ) from None


def run_serve(args) -> int:
    import panel as pn

    from ..policies import check_engine
    from ..session import cluster_for, load_jobs, load_nodes
    from ..ui.app import TITLE, Workbench
    from ..ui.state import WorkbenchState
    from .simulate import check_workload_options

    # Every option is checked here, before serving: an error later would reach each browser.
    check_engine(args.policy, "--policy")  # fifo+fgd: an engine and its plugin
    check_workload_options(args)
    low, high = WorkbenchState.param.speed.bounds
    check_number("--speed", args.speed, minimum=low, maximum=high)
    if not args.address.strip():  # (tornado reads "" as every interface; the URLs said "http://:P/")
        raise ConfigError("--address: expected an interface, e.g. 127.0.0.1 or 0.0.0.0, got ''")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port: expected 1-65535, got {args.port}")
    real = args.kubeconfig is not None or args.kubernetes
    loopback = is_loopback(args.address)
    # A real cluster always needs the token to be changed (also one connected to from the
    # controls); a simulation only off loopback or when a token is given.
    token = args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(18)
    sim_token = bool(args.token) or real or not loopback
    if real:
        shared_state = WorkbenchState.from_kubeconfig(args.kubeconfig, args.policy,
                                                      namespace=args.namespace,
                                                      context=args.context)
        what = f"Kubernetes ({shared_state.cluster_name}, {shared_state.workload})"
    else:
        jobs = load_jobs(args.trace, seed=args.seed, limit=args.limit)
        cluster = cluster_for(args.trace, args.cluster)
        nodes = load_nodes(args.trace, cluster)
        what = (f"{len(jobs)} job{'s' * (len(jobs) != 1)} ({args.trace}) on {len(nodes)}"
                f" node{'s' * (len(nodes) != 1)} ({cluster})")

        def make_state() -> WorkbenchState:
            return WorkbenchState.from_workload(args.trace, cluster, args.policy, jobs=jobs,
                                                nodes=nodes, speed=args.speed)

        shared_state = make_state() if args.shared else None
    check_listen(args.address, args.port)  # after the other options: their errors come first
    if shared_state is not None and args.run:
        shared_state.play()  # on a real cluster this starts the scheduler thread

    def session():
        ok = token_matches(pn.state.session_args, token, pn.state.headers)
        state = shared_state or make_state()
        locked = session_locked(token=token if sim_token else None, given_ok=ok,
                                shared=shared_state is not None, simulated=state.simulated)
        wb = Workbench(state=state, locked=locked, real_ok=ok, inline=False,
                       running=args.run and shared_state is None)
        if shared_state is None:
            # A session's own store: when the session ends, let go of any cluster it connected to.
            pn.state.on_session_destroyed(lambda _ctx: state.close())
        return wb.__panel__()

    host = "127.0.0.1" if args.address in ("0.0.0.0", "::") else args.address
    shown_host = socket.gethostname() if args.address in ("0.0.0.0", "::") else host
    origins = list(args.allow_websocket_origin or [])
    if not origins:
        origins = [f"{h}:{args.port}" for h in {host, shown_host, "localhost", "127.0.0.1"}]
    prefix = "/" + args.prefix.strip("/") if args.prefix else ""
    base = f"http://{shown_host}:{args.port}{prefix}/"
    print(f"{TITLE}: {what}, engine {args.policy}"
          f"{', shared' if shared_state is not None else ''}")
    if sim_token:
        print(f"  control:   {base}?token={token}")
        print(f"  read-only: {base}")
    else:
        print(f"  open: {base}")
        print("  operator (may load trace files and connect to Kubernetes from the controls):"
              f" {base}?token={token}")
    sys.stdout.flush()
    pn.serve(session, port=args.port, address=args.address, show=not args.no_browser,
             title=TITLE, websocket_origin=origins, prefix=prefix, start=True,
             print=False, check_unused_sessions=2000, unused_session_lifetime=10000)
    return 0


def register(sub) -> None:
    p = sub.add_parser("serve", help="open the workbench app in a browser (simulated cluster)")
    p.add_argument("--port", type=int, default=5006)
    p.add_argument("--address", default="127.0.0.1",
                   help="interface to listen on (default loopback; 0.0.0.0 for everyone, which"
                        " makes controls of a shared or real cluster need a token)")
    p.add_argument("--trace", default="default",
                   help="workload: default (Pollux workload 1, sampled from Philly, with"
                        " seeded deadlines, a mix of tight and loose; default:deadlines=none"
                        " without), philly, pollux:PATH, synthetic[:k=v,...], or a CSV path")
    p.add_argument("--cluster", default=None,
                   help=f"cluster preset ({', '.join(PRESETS)}) or NxG such as 16x4")
    p.add_argument("--policy", default="tiresias", help="engine to start with")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="only the first N jobs of the trace")
    p.add_argument("--speed", type=float, default=600.0,
                   help="simulated seconds per wall-clock second (default 600)")
    p.add_argument("--run", action="store_true", help="start the simulation running")
    p.add_argument("--shared", action="store_true",
                   help="one cluster for every session (a projected demo), not one each")
    p.add_argument("--token", default=None,
                   help="access token for controls (default: random when not on loopback)")
    p.add_argument("--prefix", default="", help="URL prefix (behind a proxy)")
    p.add_argument("--allow-websocket-origin", action="append", default=None, metavar="HOST[:PORT]",
                   help="browser origins allowed to connect (repeatable; default this host)")
    p.add_argument("--kubeconfig", default=None,
                   help="watch and schedule a real Kubernetes cluster instead (pods with"
                        " schedulerName=workbench); its controls always need the token")
    p.add_argument("--kubernetes", action="store_true",
                   help="a real cluster from $KUBECONFIG, ~/.kube/config or the in-cluster account")
    p.add_argument("--context", default=None,
                   help="with a real cluster: the kubeconfig context (default its current one)")
    p.add_argument("--namespace", default=None, help="with a real cluster: only this namespace")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    p.set_defaults(func=run_serve)
