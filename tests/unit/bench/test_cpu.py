"""CPU accounting from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cpu import OTHER, Snapshot, usage
from stack.procfs import process_cpu_s, thread_cpu_s, tree


def test_process_cpu_and_tree_of_this_process() -> None:
    sum(i * i for i in range(200_000))  # burn a little CPU
    assert (process_cpu_s(os.getpid()) or 0.0) > 0.0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in tree(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) is None


def test_usage_is_the_difference_per_component_and_the_rest_is_other() -> None:
    before = Snapshot({"a": {1: 10.0, 2: 5.0}, "b": {3: 1.0}}, machine_busy_s=100.0)
    after = Snapshot({"a": {1: 11.0, 2: 5.5, 4: 0.5}, "b": {3: 1.2}}, machine_busy_s=104.0)
    use = usage(before, after, window_s=2.0)
    assert use["a"].cpu_s == pytest.approx(2.0)  # 1 + 0.5 + a new process's 0.5
    assert use["a"].cpu_pct == pytest.approx(100.0)
    assert use["b"].cpu_pct == pytest.approx(10.0)
    assert use[OTHER].cpu_s == pytest.approx(4.0 - 2.2)


def test_a_named_threads_cpu_is_its_own() -> None:
    """A thread that names itself (as the span exporter's does) has its CPU under its
    name, apart from the process's other threads."""
    burnt, done = threading.Event(), threading.Event()

    def burn() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("cpu-test")
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        burnt.set()
        done.wait(10)

    thread = threading.Thread(target=burn)
    thread.start()
    try:
        assert burnt.wait(10)
        threads = thread_cpu_s(os.getpid())
    finally:
        done.set()
        thread.join()
    assert threads["cpu-test"] >= 0.15
    assert "cpu-test" not in thread_cpu_s(os.getpid())  # gone with its thread


def test_usage_gives_each_thread_names_cpu_in_the_window() -> None:
    before = Snapshot({"a": {1: 10.0}}, 100.0, {"a": {"python": 9.0, "span-export": 1.0}})
    after = Snapshot({"a": {1: 12.0}}, 103.0, {"a": {"python": 10.5, "span-export": 1.5}})
    use = usage(before, after, window_s=2.0)
    assert use["a"].threads_s == pytest.approx({"python": 1.5, "span-export": 0.5})
