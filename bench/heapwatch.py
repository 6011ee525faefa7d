"""Where a long-lived process's Python heap grows: `tracemalloc` snapshots taken in it
every minute, compared afterwards. A debugging aid for the long soak
(`pricingctl bench soak --long --heapwatch DIR`), never on by default and never in the
pools' code: a process opts in through its environment (`environment`: the directory in
`HEAPWATCH_DIR_ENV`, `heapwatch_site/` on PYTHONPATH so Python's `site` runs `install`
at start-up), and a gunicorn master's workers are watched from their fork.

Snapshots go to `<dir>/<pid>-<name>/<seconds since start>.snap`. The snapshots and the
one frame kept per allocation cost the watched process memory and CPU: its RSS and
timings are not the product's while it is watched.
"""

from __future__ import annotations

import _thread
import os
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from toolkit.contract import HEAPWATCH_DIR_ENV

# The processes watched: a command line naming one of these (the pools' gunicorn, the
# upstream simulator). The launcher and the load generator are left alone.
WATCHED = ("gunicorn", "simulator")
EVERY_S = 60.0  # seconds between snapshots
FRAMES = 1  # frames kept per allocation: the allocating line

# The original sleep, before gevent patches `time`: the snapshot thread is a real OS
# thread, never a greenlet.
_sleep = time.sleep


def environment(where: Path) -> dict[str, str]:
    """What a process's environment needs for it to be watched, snapshots under
    `where`."""
    site = str(Path(__file__).with_name("heapwatch_site"))
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, HEAPWATCH_DIR_ENV: str(where)}


@contextmanager
def watching(where: Path | None) -> Iterator[None]:
    """This process's environment set for `environment(where)` within the block, so
    that every process started in it is watched; nothing if `where` is None."""
    if where is None:
        yield
        return
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", HEAPWATCH_DIR_ENV)}
    os.environ.update(environment(where))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _name() -> str:
    args = " ".join(getattr(sys, "orig_argv", sys.argv))
    for watched in WATCHED:
        if watched in args:
            return watched
    return ""


def _snapshots(out: Path) -> None:
    start = time.monotonic()
    while True:
        _sleep(EVERY_S)
        at_s = time.monotonic() - start
        snap = tracemalloc.take_snapshot()
        snap.dump(str(out / f"{at_s:07.0f}.snap"))


def _watch(base: Path, name: str) -> None:
    out = base / f"{os.getpid()}-{name}"
    out.mkdir(parents=True, exist_ok=True)
    _thread.start_new_thread(_snapshots, (out,))


def install() -> None:
    """Start tracing allocations and a snapshot thread in this process, and in each
    child it forks, if the environment asks for it and the process is watched."""
    where = os.environ.get(HEAPWATCH_DIR_ENV)
    name = _name()
    if not where or not name:
        return
    base = Path(where)
    tracemalloc.start(FRAMES)
    _watch(base, name)
    # A pool's workers are forked children: a thread does not survive the fork.
    os.register_at_fork(after_in_child=lambda: _watch(base, f"{name}-worker"))


@dataclass(frozen=True)
class Site:
    where: str  # file:line
    grew_bytes: int
    grew_blocks: int
    now_bytes: int


def growing_sites(first: Path, last: Path, top: int = 8) -> list[Site]:
    """The allocation sites whose live bytes grew most from snapshot `first` to `last`."""
    old = tracemalloc.Snapshot.load(str(first))
    new = tracemalloc.Snapshot.load(str(last))
    keep = (tracemalloc.Filter(False, tracemalloc.__file__),)
    diff = new.filter_traces(keep).compare_to(old.filter_traces(keep), "lineno")
    return [
        Site(
            where=f"{d.traceback[0].filename}:{d.traceback[0].lineno}",
            grew_bytes=d.size_diff,
            grew_blocks=d.count_diff,
            now_bytes=d.size,
        )
        for d in diff[:top]
        if d.size_diff
    ]


def _total(path: Path) -> int:
    return sum(s.size for s in tracemalloc.Snapshot.load(str(path)).statistics("filename"))


def report(base: Path, *, from_s: float, requests_per_s: float | None) -> list[str]:
    """Per watched process: its traced bytes at each snapshot from `from_s` on, and the
    sites that grew most between the first of those and the last."""
    lines = []
    for proc in sorted(p for p in base.iterdir() if p.is_dir()):
        snaps = sorted(proc.glob("*.snap"), key=lambda p: float(p.stem))
        snaps = [s for s in snaps if float(s.stem) >= from_s]
        if len(snaps) < 2:
            continue
        span_s = float(snaps[-1].stem) - float(snaps[0].stem)
        totals = [_total(s) // 1024 for s in snaps]
        lines.append(f"{proc.name}: traced KiB over {span_s:.0f} s: {totals}")
        for site in growing_sites(snaps[0], snaps[-1]):
            per_million = ""
            if requests_per_s:
                per_million = f", {site.grew_bytes / (requests_per_s * span_s) * 1e6 / 1024:+.0f}"
                per_million += " KiB per million requests"
            lines.append(
                f"  {site.grew_bytes / 1024:+9.1f} KiB {site.grew_blocks:+7d} blocks "
                f"(now {site.now_bytes / 1024:.0f} KiB){per_million}  {site.where}"
            )
    return lines
