"""A normal start of the stack's supervisord (``workers.supervision``) prints no CRIT line (issue
31: two at every start as root, "Supervisor is running as root" and "Server
'unix_http_server' running without any HTTP authentication checking"), and its socket answers
the password kept beside it (``webapp.health.supervisor.supervisor_rpc``) and refuses a client
without it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from pathlib import Path

import pytest
from supervisor.xmlrpc import SupervisorTransport

from webapp.health.supervisor import rpc_password_path, supervisor_rpc
from workers.supervision import socket_path, write_config

ROOT = Path(__file__).resolve().parents[2]


def test_a_normal_start_prints_no_crit_line_and_the_socket_asks_for_its_password(tmp_path):
    var = Path(tempfile.mkdtemp(prefix="rsup-", dir="/tmp"))  # a short socket path
    try:
        _start_and_check(tmp_path, var)
    finally:
        shutil.rmtree(var, ignore_errors=True)


def _start_and_check(tmp_path: Path, var: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text("sleeper: sleep 600\n")
    (var / "run.env").write_text("")
    conf = write_config(procfile, var / "run.env", var)
    sock = socket_path(var)
    assert rpc_password_path(sock).stat().st_mode & 0o777 == 0o600
    output = tmp_path / "supervisord.out"
    with output.open("wb") as out:
        supervisord = subprocess.Popen(
            [str(Path(sys.executable).parent / "supervisord"), "-n", "-c", str(conf)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert supervisord.poll() is None, output.read_text()
            try:
                # a new client each time: one whose connect failed cannot send again
                rpc = supervisor_rpc(f"unix://{sock}")
                if rpc.supervisor.getProcessInfo("sleeper")["statename"] == "RUNNING":
                    break
            except (OSError, xmlrpc.client.Fault):
                pass  # not listening yet
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.3)
        # a client without the password is turned away
        anonymous = SupervisorTransport(None, None, f"unix://{sock}")
        with pytest.raises(xmlrpc.client.ProtocolError) as refused:
            xmlrpc.client.ServerProxy("http://127.0.0.1", anonymous).supervisor.getState()
        assert refused.value.errcode == 401
    finally:
        supervisord.send_signal(signal.SIGTERM)
        supervisord.wait(timeout=60)
    printed = output.read_text()
    logged = (var / "log" / "supervisord.log").read_text()
    assert "INFO supervisord started with pid" in logged
    assert [line for line in (printed + logged).splitlines() if " CRIT " in line] == []
