"""One process: started in its own process group, logged to a file, killed by group,
and dying with the launcher whatever killed it (SIGKILL included)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from stack.procfs import group_members
from toolkit.logs import tail_file
from toolkit.wait import wait_until

# prctl(2): the signal the kernel sends a process when the thread that forked it exits.
PR_SET_PDEATHSIG = 1
# What a child gets when its launcher dies: SIGTERM, so that a gunicorn master stops
# its workers (one whose master died without doing so leaves by itself:
# routing.gunicorn.ORPHAN_SERVE_S)
# and Envoy and Jaeger close their listeners.
DEATH_SIGNAL = signal.SIGTERM


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A `preexec_fn`: the child gets DEATH_SIGNAL when its parent dies. Each process runs
    in a session of its own (so that it can be stopped by group), which takes it out of
    the terminal's reach: without this an OOM kill, a CI timeout or `kill -9` of the
    launcher would leave the whole stack running, holding every port. The kernel ties
    the signal to the forking THREAD: start processes from a thread that lives as long
    as the stack (the launcher's main thread)."""

    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return setup


class StartError(RuntimeError):
    """A process did not become ready. The message carries the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the kernel's pick)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports that were free a moment ago. Every socket stays bound
    until all are picked: ports picked one at a time can repeat (each is free again once
    its probe closes), and two parts of a stack given one port do not both fail. An
    Envoy listener that cannot bind is only logged while Envoy serves on."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class Proc:
    """A child process in its own session, so stopping it also stops its children."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    # True: the launcher talks to it over its stdin and stdout (pipes); its stderr
    # alone goes to the log.
    piped: bool = False
    # Descriptors it inherits, under the same numbers (a pool's listening socket, which
    # the launcher holds: `bind fd://N`).
    pass_fds: tuple[int, ...] = ()
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # Its readiness check and what it says, as `wait_ready` was last given them: how a
    # restart of the process (`again`) knows it is back.
    ready: Callable[[], bool] | None = field(default=None, repr=False)
    ready_what: str = "ready"

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = {**os.environ, **(self.env or {})}
        try:
            self.popen = subprocess.Popen(
                list(self.argv),
                stdout=subprocess.PIPE if self.piped else log,
                stderr=log if self.piped else subprocess.STDOUT,
                stdin=subprocess.PIPE if self.piped else subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                pass_fds=self.pass_fds,
                preexec_fn=die_with_parent(os.getpid()),
            )
        except FileNotFoundError:
            raise StartError(f"{self.name}: command not found: {self.argv[0]}") from None
        finally:
            log.close()
        return self

    def again(self) -> Proc:
        """The same process, not started: same command, environment, log (appended to)
        and readiness check."""
        return replace(self, popen=None)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_status(self) -> str:
        """How it ended, in words: `exit code 1`, `signal 9 (SIGKILL)`, or `running`."""
        code = self.popen.poll() if self.popen is not None else None
        if code is None:
            return "running"
        if code < 0:
            return f"signal {-code} ({signal.Signals(-code).name})"
        return f"exit code {code}"

    def log_tail(self, lines: int = 40) -> str:
        return tail_file(self.log_path, lines)

    def wait_ready(
        self,
        ready: Callable[[], bool] | None = None,
        timeout_s: float = 30.0,
        what: str | None = None,
    ) -> None:
        """Wait until `ready()` says so (default: the check it was last given); raise
        StartError, with the log's tail, when it exits first or times out."""
        if ready is not None:
            self.ready, self.ready_what = ready, what or "ready"
        check, what = self.ready, self.ready_what
        if check is None:
            raise StartError(f"{self.name}: no readiness check to wait for")

        def alive_and_ready() -> bool:
            if not self.alive():
                code = self.popen.returncode if self.popen else None
                raise StartError(
                    f"{self.name} exited with code {code} before it was {what}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            return check()

        if not wait_until(alive_and_ready, timeout_s):
            raise StartError(
                f"{self.name} was not {what} after {timeout_s:.0f} s; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM the whole process group, without waiting (`stop` waits)."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the whole process group, then SIGKILL what is left after `timeout_s`.
        The group outlives its leader when the leader died first: a SIGKILLed gunicorn
        master leaves its workers (orphans, still serving on the pool's socket), which
        SIGTERM stops gracefully (they finish what they hold)."""
        if self.popen is None:
            return
        pgid = self.popen.pid
        self.terminate()
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout_s)
        wait_until(lambda: not group_members(pgid), deadline - time.monotonic(), 0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
