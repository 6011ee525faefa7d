"""stack.supervise: what exited is restarted after its back-off, said in one line and
counted; a crash loop is the reason to stop. A fake stack and a fake clock: no process."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from stack.launch import Stack
from stack.procs import StartError
from stack.supervise import BACKOFF_MAX_S, CrashLoop, Supervisor, backoff_s


@dataclass
class FakeProc:
    pid: int
    alive_: bool = True
    log_path: Path = Path("/run/logs/envoy.log")

    def alive(self) -> bool:
        return self.alive_

    def exit_status(self) -> str:
        return "signal 9 (SIGKILL)"


@dataclass
class FakeStack:
    procs: dict[str, FakeProc]
    restarts: Counter[str] = field(default_factory=Counter)
    fail_restarts: int = 0

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs.items() if not proc.alive()]

    def restart(self, name: str, timeout_s: float) -> FakeProc:
        self.restarts[name] += 1
        if self.fail_restarts:
            self.fail_restarts -= 1
            self.procs[name] = FakeProc(self.procs[name].pid + 1, alive_=False)
            raise StartError("envoy exited with code 1 before it was ready; log ...")
        self.procs[name] = FakeProc(self.procs[name].pid + 1)
        return self.procs[name]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def supervisor(stack: FakeStack, clock: Clock, said: list[str], **kw: Any) -> Supervisor:
    return Supervisor(cast(Stack, stack), said.append, clock=clock, **kw)


def test_the_first_restart_is_at_once_then_the_back_off_doubles() -> None:
    assert [backoff_s(n) for n in range(5)] == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert backoff_s(100) == BACKOFF_MAX_S


def test_a_dead_process_is_restarted_said_in_one_line_and_counted() -> None:
    stack, clock, said = FakeStack({"simulator": FakeProc(10), "envoy": FakeProc(20)}), Clock(), []
    watch = supervisor(stack, clock, said)
    assert watch.check() is None and said == []  # all alive: nothing to do
    stack.procs["envoy"].alive_ = False
    assert watch.check() is None
    assert stack.procs["envoy"].pid == 21 and stack.procs["simulator"].pid == 10
    assert stack.restarts == {"envoy": 1}
    (line,) = said
    assert line.startswith("envoy (pid 20) exited with signal 9 (SIGKILL); restarted as pid 21")


def test_a_second_crash_waits_for_its_back_off() -> None:
    stack, clock, said = FakeStack({"envoy": FakeProc(20)}), Clock(), []
    watch = supervisor(stack, clock, said)
    stack.procs["envoy"].alive_ = False
    watch.check()
    stack.procs["envoy"].alive_ = False
    watch.check()
    assert stack.restarts["envoy"] == 1  # not yet: 0.5 s of back-off
    clock.now += backoff_s(1)
    watch.check()
    assert stack.restarts["envoy"] == 2 and stack.procs["envoy"].alive()


def test_a_failed_restart_counts_as_a_crash_and_is_tried_again() -> None:
    stack, clock, said = FakeStack({"envoy": FakeProc(20)}, fail_restarts=1), Clock(), []
    watch = supervisor(stack, clock, said)
    stack.procs["envoy"].alive_ = False
    watch.check()
    assert "its restart failed: envoy exited with code 1 before it was ready" in said[0]
    clock.now += backoff_s(1)
    watch.check()  # the failed one is a second crash ...
    clock.now += backoff_s(1)
    watch.check()  # ... restarted after its back-off
    assert stack.procs["envoy"].alive() and len(watch.crashes["envoy"]) == 2


def test_a_crash_loop_is_the_reason_to_stop_and_old_crashes_do_not_count() -> None:
    loop = CrashLoop(crashes=3, window_s=60.0)
    stack, clock, said = FakeStack({"simulator": FakeProc(10)}), Clock(), []
    watch = supervisor(stack, clock, said, loop=loop)

    def crash() -> str | None:
        stack.procs["simulator"].alive_ = False
        reason = watch.check()
        clock.now += BACKOFF_MAX_S
        return reason or watch.check()

    assert crash() is None
    clock.now += loop.window_s  # the first one is forgotten
    assert crash() is None and crash() is None
    reason = crash()
    assert reason == (
        "simulator exited 3 times within 60 s (last: signal 9 (SIGKILL)), a crash loop; "
        "stopping the stack (see /run/logs/envoy.log)"
    )
    assert stack.restarts["simulator"] == 3
