"""stack.procs: ports, readiness polling, and processes stopped by process group."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from stack.procs import Proc, StartError, free_port, free_ports, port_in_use
from toolkit.wait import wait_until


def test_free_port_is_bindable_and_port_in_use_sees_a_listener() -> None:
    port = free_port()
    assert not port_in_use("127.0.0.1", port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert port_in_use("127.0.0.1", port)


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # A parent that starts a grandchild and reports its pid: both must go on stop().
    script = (
        "import subprocess, sys, time;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid));"
        "time.sleep(60)"
    )
    proc = Proc("sleeper", [sys.executable, "-c", script], tmp_path / "sleeper.log").start()
    proc.wait_ready(lambda: pid_file.exists() and pid_file.read_text() != "", 20, "started")
    grandchild = int(pid_file.read_text())
    proc.stop(timeout_s=5)
    assert not proc.alive()
    assert wait_until(lambda: not _running(grandchild), 5)


def test_a_process_that_dies_before_ready_names_itself_and_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('cannot bind'); raise SystemExit(3)"]
    proc = Proc("pool-io", argv, tmp_path / "logs" / "pool-io.log").start()
    with pytest.raises(StartError) as info:
        proc.wait_ready(lambda: False, 20, "ready")
    message = str(info.value)
    assert message.startswith("pool-io exited with code 3 before it was ready")
    assert "cannot bind" in message  # the tail of its log
    proc.stop()


def test_not_ready_in_time_is_a_start_error(tmp_path: Path) -> None:
    proc = Proc("slow", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.log")
    proc.start()
    try:
        with pytest.raises(StartError, match=r"^slow was not ready after 0 s"):
            proc.wait_ready(lambda: False, 0.2, "ready")
    finally:
        proc.stop()


def test_a_missing_command_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StartError, match="command not found: /no/such/binary"):
        Proc("x", ["/no/such/binary"], tmp_path / "x.log").start()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it is dead but not reaped by its (dead) parent.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_free_ports_holds_every_pick_until_all_are_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe stays bound until the last is picked, so the kernel cannot hand one
    port out twice (picked one at a time, a port is free again once its probe closes)."""
    events: list[str] = []
    real_socket = socket.socket

    class Probe(real_socket):  # type: ignore[misc]
        def bind(self, address: object) -> None:
            events.append("bind")
            super().bind(address)

        def close(self) -> None:
            if self.fileno() != -1:
                events.append("close")
            super().close()

    monkeypatch.setattr(socket, "socket", Probe)
    ports = free_ports(5)
    assert events == ["bind"] * 5 + ["close"] * 5
    assert len(set(ports)) == 5
    monkeypatch.undo()
    for port in ports:
        assert not port_in_use("127.0.0.1", port)


def test_a_dead_leaders_orphans_get_sigterm_and_are_waited_for(tmp_path: Path) -> None:
    """A SIGKILLed gunicorn master leaves its workers: stop() ends them gracefully
    (SIGTERM, then waits), not with a SIGKILL a moment after the leader is gone."""
    pid_file, done = tmp_path / "child.pid", tmp_path / "child.done"
    # The grandchild takes a moment to leave on SIGTERM, as a worker finishing its requests.
    child = (
        "import signal, sys, time;"
        f"signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), open({str(done)!r}, 'w'),"
        " sys.exit(0)));"
        "time.sleep(60)"
    )
    script = (
        "import subprocess, sys, time;"
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}]);"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid));"
        "time.sleep(60)"
    )
    proc = Proc("master", [sys.executable, "-c", script], tmp_path / "master.log").start()
    proc.wait_ready(lambda: pid_file.exists() and pid_file.read_text() != "", 20, "started")
    time.sleep(0.3)  # the grandchild has installed its handler
    proc.signal(signal.SIGKILL)
    assert wait_until(lambda: not proc.alive(), 5)
    proc.stop(timeout_s=5)
    assert done.exists()  # it finished, not killed
    assert not _running(int(pid_file.read_text()))


def test_again_is_the_same_process_waited_for_with_the_same_check(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    proc = Proc("sleeper", argv, tmp_path / "s.log").start()
    started = [proc]
    try:
        proc.wait_ready(lambda: True, 5, "sleeping")
        proc.signal(signal.SIGKILL)
        assert wait_until(lambda: not proc.alive(), 5)
        assert proc.exit_status() == "signal 9 (SIGKILL)"
        again = proc.again().start()
        started.append(again)
        again.wait_ready(timeout_s=5)  # its own check, as it was given
        assert again.pid != proc.pid and again.argv == proc.argv
        assert again.ready_what == "sleeping" and again.exit_status() == "running"
    finally:
        for each in started:
            each.stop()
