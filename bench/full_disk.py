"""A file system that can be filled on demand, for `pricingctl bench faults`: a
size-limited tmpfs mounted on a directory of the run (root only, as `mount -t tmpfs -o
size=...` needs CAP_SYS_ADMIN), filled by one filler file up to its last block and freed
by deleting it. A loop device would do the same with a real file system (`truncate -s
32M img && mkfs.ext4 img && mount -o loop img DIR`), root too; the tmpfs needs no image.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

SIZE_MIB = 64
_FILLER = ".filler"
_BLOCK = b"\0" * 4096


class NoMount(RuntimeError):
    """The size-limited tmpfs could not be mounted (not root, or no CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def small_tmpfs(path: Path, size_mib: int = SIZE_MIB) -> Iterator[Path]:
    """`path` as a tmpfs of `size_mib` MiB while the block runs; unmounted (lazily: a
    process of the stack may still hold a file open) however it ends."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise NoMount(f"mount -t tmpfs -o size={size_mib}m {path}: {reason[0]}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> int:
    """Fill the file system under `path` up to its last byte; returns the bytes taken."""
    filler = path / _FILLER
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    taken = 0
    try:
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, free)
            taken = free
        while True:  # what fallocate left: a block at a time, then byte by byte
            try:
                taken += os.write(fd, _BLOCK)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return taken


def free(path: Path) -> None:
    """Undo `fill`."""
    (path / _FILLER).unlink(missing_ok=True)


def available_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
