"""The stack of `make demo` under supervisord: its config, its restart counter, its state.

    python -m workers.supervision listen       # supervisord's event listener (see below)
    python -m workers.supervision pace NAME    # back-off before NAME starts again (see below)

Why supervisord (PyPI ``supervisor``): it is the long-kept process manager of the Python world
(maintained since 2004, 4.3 in 2025), a pure-Python wheel that installs in the venv (no system
service, no root, no Node runtime as pm2 needs; systemd user units or s6/runit are not there
on every machine that runs `make demo`), runs in the foreground, restarts each process on its
own, writes one log file per process, and answers ``supervisorctl`` and XML-RPC on a Unix
socket. honcho (used before) ends every process when one of them exits.

What this module owns:

* ``render_config``: var/supervisord.conf from the top-level ``Procfile`` (the one list of the
  stack's processes) and var/run.env (the addresses ``scripts/stack.py prepare`` decided). Each
  Procfile line becomes a ``[program:NAME]`` run by ``/bin/sh -c`` in the repository root, its
  output in var/log/NAME.log, stopped with SIGTERM to its whole process group (a Ray head's
  ``ray start`` and its children, a Celery worker's pool) and SIGKILL to the group 10 s later.
* A normal start logs no CRIT line: ``user=`` names the user supervisord runs as (root too,
  as in a container: it keeps running as itself), and the Unix socket, already owner-only
  (``chmod=0700``), asks for ``RPC_USER`` and a password made once and kept beside it
  (``rpc_password``; ``webapp.health.supervisor.supervisor_rpc`` reads it there).
* Restarts and back-off. ``autorestart=true``: a process that exits for any reason, after any
  time, is started again. supervisord's own back-off covers only a process that dies within
  ``startsecs`` (1 s, 2 s, 3 s ... then FATAL after ``startretries``); a process that dies
  later would be restarted at once, every time. So each program first runs ``pace NAME``,
  which sleeps 2, 4, 8 ... up to 60 s when NAME has exited 3 or more times within the last
  2 minutes (from the counter below): a crash loop costs one start a minute, never a spinning
  CPU, and the sleep carries the start past ``startsecs`` so supervisord never gives up on it
  (FATAL) while, say, the database is down for a while.
* The restart counter. supervisord keeps none, so the event listener ``[eventlistener:restarts]``
  receives every PROCESS_STATE event and keeps, per process, its restarts (a start that follows
  an exit: EXITED or BACKOFF -> STARTING) and its recent exit times in
  var/supervisor/restarts.json (written whole and renamed, so a reader never sees half of it),
  and writes ONE line per restart to var/log/restarts.log. The file belongs to one supervisord
  (its pid is in it): a new supervisord starts from zero.
* The state for /health/ (each process's state, pid, uptime and restarts) is read by
  ``webapp.health.supervisor``, which also owns the counter file's format (``Counted``,
  ``read_counts``) that the listener here writes: the web side never imports ``workers``.

No Django import: this runs before settings exist and inside supervisord's listener
(``webapp.health.supervisor`` is plain Python, no Django either).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from webapp.health.supervisor import (
    RPC_USER,
    Counted,
    counts_path,
    read_counts,
    rpc_password_path,
)

ROOT = Path(__file__).resolve().parent.parent
PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
SOCKET_NAME = "supervisor.sock"
# the longest Unix socket path Linux takes is 107 bytes
SOCKET_PATH_MAX = 107
# pace: exits within this window count; from PACE_AFTER of them on, sleep 2, 4, 8 ... PACE_MAX_S
PACE_WINDOW_S = 120.0
PACE_AFTER = 3
PACE_MAX_S = 60.0
EXITS_KEPT = 20
# start order (lower first; stopped in the reverse order)
PRIORITY = {"redis": 100, "ray": 200}
DEFAULT_PRIORITY = 300


class SupervisionError(Exception):
    """One line for the user (a bad Procfile or run.env, a socket path too long)."""


# ------------------------------------------------------------------ the config


def read_procfile(path: Path) -> dict[str, str]:
    """``NAME: command`` lines in order; comments and blank lines skipped."""
    processes: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = PROCFILE_LINE.match(line)
        if not match:
            raise SupervisionError(f"{path}:{number}: not a `name: command` line: {line!r}")
        name, command = match.groups()
        if name in processes:
            raise SupervisionError(f"{path}:{number}: process {name!r} is listed twice")
        processes[name] = command.strip()
    if not processes:
        raise SupervisionError(f"{path} lists no process")
    return processes


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SupervisionError(f"{path}:{number}: not a KEY=value line: {line!r}")
        env[key] = value
    return env


def socket_path(var: Path) -> Path:
    return var / "supervisor" / SOCKET_NAME


def _escape(text: str) -> str:
    """supervisord expands %(name)s in commands and values: a literal % is %%."""
    return text.replace("%", "%%")


def _env_value(value: str) -> str:
    if '"' in value or "\n" in value:
        raise SupervisionError(f"an environment value holds a quote or a newline: {value!r}")
    return f'"{_escape(value)}"'


def render_config(
    procfile: Path, env_file: Path, var: Path, *, python: str = sys.executable
) -> str:
    """The text of supervisord.conf for this Procfile and run.env (see the module docstring)."""
    processes = read_procfile(procfile)
    env = read_env_file(env_file) if env_file.exists() else {}
    sock = socket_path(var)
    if len(str(sock).encode()) > SOCKET_PATH_MAX:
        raise SupervisionError(
            f"the supervisor socket path {sock} is longer than {SOCKET_PATH_MAX} bytes (a Unix "
            "socket limit); use a shorter RFT_VAR_DIR"
        )
    log = var / "log"
    password = _escape(rpc_password(sock))
    bin_dir = str(Path(python).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    env["RFT_VAR_DIR"] = str(var)
    environment = ",".join(f"{key}={_env_value(value)}" for key, value in env.items())
    sections = [
        f"""; written by `python scripts/stack.py supervise` from Procfile and {env_file.name};
; edit the Procfile, not this file (it is rewritten at every start)

[unix_http_server]
file={_escape(str(sock))}
chmod=0700
username={RPC_USER}
password={password}

[supervisorctl]
serverurl=unix://{_escape(str(sock))}
username={RPC_USER}
password={password}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisord]
nodaemon=true
user={_escape(pwd.getpwuid(os.getuid()).pw_name)}
logfile={_escape(str(log / "supervisord.log"))}
logfile_maxbytes=10MB
logfile_backups=2
pidfile={_escape(str(var / "supervisor" / "supervisord.pid"))}
childlogdir={_escape(str(log))}
directory={_escape(str(ROOT))}
environment={environment}

[eventlistener:restarts]
command={_escape(shlex.join([python, "-m", "workers.supervision", "listen"]))}
directory={_escape(str(ROOT))}
events=PROCESS_STATE
buffer_size=1000
autorestart=true
startsecs=1
stdout_logfile=NONE
stderr_logfile={_escape(str(log / "restarts.log"))}
stderr_logfile_maxbytes=5MB
stderr_logfile_backups=1
priority=10
"""
    ]
    for name, command in processes.items():
        wrapped = f"{shlex.quote(python)} -m workers.supervision pace {name} && {command}"
        sections.append(
            f"""[program:{name}]
command={_escape(shlex.join(["/bin/sh", "-c", wrapped]))}
directory={_escape(str(ROOT))}
priority={PRIORITY.get(name, DEFAULT_PRIORITY)}
autostart=true
autorestart=true
startsecs=1
startretries=5
stopsignal=TERM
stopasgroup=true
killasgroup=true
stopwaitsecs=10
redirect_stderr=true
stdout_logfile={_escape(str(log / f"{name}.log"))}
stdout_logfile_maxbytes=20MB
stdout_logfile_backups=2
"""
        )
    return "\n".join(sections)


def rpc_password(sock: Path) -> str:
    """The socket's password (``webapp.health.supervisor``): made once, kept owner-only beside
    the socket, so a running stack's clients keep it when the config is written again."""
    path = rpc_password_path(sock)
    try:
        return path.read_text().strip() or _new_password(path)
    except FileNotFoundError:
        return _new_password(path)


def _new_password(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def write_config(procfile: Path, env_file: Path, var: Path) -> Path:
    """Write var/supervisord.conf (and the dirs it names); returns its path."""
    (var / "log").mkdir(parents=True, exist_ok=True)
    (var / "supervisor").mkdir(parents=True, exist_ok=True)
    text = render_config(procfile, env_file, var)
    target = var / "supervisord.conf"
    partial = target.with_suffix(".conf.part")
    partial.write_text(text)
    partial.replace(target)
    return target


# ------------------------------------------------------------------ the restart counter


class RestartCounter:
    """Folds PROCESS_STATE events into per-process counts kept in ``path`` (JSON)."""

    def __init__(self, path: Path, supervisord_pid: int, log=sys.stderr):
        self.path = path
        self.supervisord_pid = supervisord_pid
        self.log = log
        self.processes: dict[str, Counted] = {}
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
        if saved.get("supervisord_pid") == supervisord_pid:  # the listener itself restarted
            self.processes = {
                name: Counted(**counted) for name, counted in saved.get("processes", {}).items()
            }
        self.save()

    def event(self, event_name: str, payload: dict[str, str], now: float | None = None) -> None:
        now = time.time() if now is None else now
        name = payload.get("processname", "")
        if not name or payload.get("groupname") == "restarts":
            return
        state = event_name.removeprefix("PROCESS_STATE_")
        counted = self.processes.setdefault(name, Counted())
        if state in ("EXITED", "BACKOFF"):
            counted.exits = [*counted.exits, now][-EXITS_KEPT:]
            expected = {"1": "expected", "0": "unexpected"}.get(payload.get("expected", ""), "")
            counted.last_exit = (
                f"{state}{f' ({expected})' if expected else ''} at "
                f"{time.strftime('%H:%M:%S', time.localtime(now))} after "
                f"{payload.get('from_state', '?')}"
            )
        elif state == "STARTING" and payload.get("from_state") in ("EXITED", "BACKOFF"):
            counted.restarts += 1
            print(
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))} restart "
                f"{counted.restarts} of {name}: {counted.last_exit or 'it exited'}; "
                f"starting again (try {int(payload.get('tries', '0')) + 1})",
                file=self.log,
                flush=True,
            )
        else:
            return
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "supervisord_pid": self.supervisord_pid,
            "processes": {name: asdict(c) for name, c in sorted(self.processes.items())},
        }
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps(body, indent=1))
        partial.replace(self.path)


def listen() -> int:
    """supervisord's event listener: count restarts (see the module docstring)."""
    from supervisor import childutils

    var = Path(os.environ.get("RFT_VAR_DIR", ROOT / "var"))
    counter = RestartCounter(counts_path(var), os.getppid())
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        try:
            fields, _ = childutils.eventdata(payload + "\n")
            counter.event(headers.get("eventname", ""), fields)
        except Exception as err:  # noqa: BLE001 - a bad event must not stop the counting
            print(f"restart counter: skipped an event ({err!r}): {payload!r}", file=sys.stderr)
        childutils.listener.ok(sys.stdout)


def pace_delay(exits: list[float], now: float) -> float:
    """Seconds to wait before a start, given the process's exit times (see the docstring)."""
    recent = sum(1 for t in exits if now - t <= PACE_WINDOW_S)
    if recent < PACE_AFTER:
        return 0.0
    return min(PACE_MAX_S, 2.0 ** (recent - PACE_AFTER + 1))


def pace(name: str) -> int:
    var = Path(os.environ.get("RFT_VAR_DIR", ROOT / "var"))
    counted = read_counts(var).get(name)
    delay = pace_delay(counted.exits if counted else [], time.time())
    if delay:
        print(
            f"{name} exited {len(counted.exits)} times, the last at "
            f"{time.strftime('%H:%M:%S', time.localtime(counted.exits[-1]))}: waiting "
            f"{delay:.0f} s before starting it again",
            flush=True,
        )
        time.sleep(delay)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["listen"]:
        return listen()
    if len(argv) == 2 and argv[0] == "pace":
        return pace(argv[1])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
