"""What supervisord says about the stack of `make demo`, for /health/: each supervised process's
state, pid, uptime and restarts, read through supervisor's own XML-RPC client on the Unix socket
named by ``SUPERVISOR_SERVER_URL`` (supervisord sets it in every child's environment); None when
the caller does not run under supervisord (tests, a deployment under systemd or Kubernetes).

The socket asks for a user name and password (``RPC_USER``; the password in
``rpc.password`` beside the socket, mode 0600, written by ``workers.supervision``): supervisord
logs a CRIT line at every start for a socket without them. ``supervisor_rpc`` reads it there.

Also the restart counter's file (``var/supervisor/restarts.json``): its format (``Counted``) and
its reader. supervisord keeps no restart count; the event listener of ``workers.supervision``
writes this file and its ``pace`` reads it, through this module (the web side never imports
``workers``). Plain Python, no Django: supervisord's listener imports it before settings exist.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COUNTS_NAME = "restarts.json"
RPC_TIMEOUT_S = 2.0
RPC_USER = "rft"
RPC_PASSWORD_NAME = "rpc.password"


def rpc_password_path(socket_file: Path) -> Path:
    """Where the socket's password is kept: beside the socket, in the owner-only directory."""
    return Path(socket_file).parent / RPC_PASSWORD_NAME


def counts_path(var: Path) -> Path:
    return var / "supervisor" / COUNTS_NAME


@dataclass
class Counted:
    restarts: int = 0
    exits: list[float] = field(default_factory=list)  # the last EXITS_KEPT exit times
    last_exit: str = ""  # e.g. "EXITED (unexpected) at 12:03:04 after RUNNING"


def read_counts(var: Path) -> dict[str, Counted]:
    try:
        saved = json.loads(counts_path(var).read_text())
    except (OSError, ValueError):
        return {}
    return {name: Counted(**c) for name, c in saved.get("processes", {}).items()}


@dataclass
class SupervisedProcess:
    name: str
    state: str  # RUNNING, STARTING, BACKOFF, EXITED, FATAL, STOPPED ...
    up: bool
    pid: int
    description: str  # supervisord's: "pid 123, uptime 0:01:02" or why it is not running
    restarts: int
    last_exit: str

    def as_dict(self) -> dict:
        return asdict(self)


def supervisor_rpc(serverurl: str):
    """supervisor's own XML-RPC client on the Unix socket, with a timeout (it has none), signed
    in with the socket's password when one is kept beside it."""
    import xmlrpc.client

    from supervisor.xmlrpc import SupervisorTransport, UnixStreamHTTPConnection

    class _TimedConnection(UnixStreamHTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(RPC_TIMEOUT_S)
            self.sock.connect(self.socketfile)

    username = password = None
    if serverurl.startswith("unix://"):
        try:
            secret = rpc_password_path(Path(serverurl[len("unix://") :])).read_text().strip()
        except OSError:
            secret = ""  # a supervisord of an older config: a socket without a password
        if secret:
            username, password = RPC_USER, secret
    transport = SupervisorTransport(username, password, serverurl)
    if serverurl.startswith("unix://"):

        def connection():
            conn = _TimedConnection("localhost")
            conn.socketfile = serverurl[len("unix://") :]
            return conn

        transport._get_connection = connection
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport)


def supervised_processes(env: dict[str, str] | None = None) -> list[SupervisedProcess] | None:
    """Each supervised process (the listener left out); None when not under supervisord.
    Raises OSError / xmlrpc errors when supervisord does not answer."""
    env = os.environ if env is None else env
    serverurl = env.get("SUPERVISOR_SERVER_URL")
    if not serverurl:
        return None
    infos = supervisor_rpc(serverurl).supervisor.getAllProcessInfo()
    var = Path(env.get("RFT_VAR_DIR", ROOT / "var"))
    counts = read_counts(var)
    processes = []
    for info in infos:
        if info["group"] == "restarts":
            continue
        counted = counts.get(info["name"], Counted())
        processes.append(
            SupervisedProcess(
                name=info["name"],
                state=info["statename"],
                up=info["statename"] == "RUNNING",
                pid=info["pid"],
                description=info["description"],
                restarts=counted.restarts,
                last_exit=counted.last_exit,
            )
        )
    return processes
