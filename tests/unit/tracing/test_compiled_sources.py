"""The compiled hot path's C sources (``tracing/timing/csrc/``, ``tracing/_client_native.c``,
``tracing/_export_native.c``, ``tracing/_otlp_native.c``)
as a maintainer meets them: every file small enough to read, and compiled without a
single warning against each CPython version's headers found on the machine (the build's
extensions are optional, so a warning that becomes an error in a newer CPython would
otherwise only show as a worker running the Python reference)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [
    *sorted((ROOT / "tracing" / "timing" / "csrc").glob("*.c")),
    ROOT / "tracing" / "_client_native.c",
    ROOT / "tracing" / "_export_native.c",
    ROOT / "tracing" / "_otlp_native.c",
]
MAX_LINES = 800
# Other CPython versions' headers, where pyenv keeps them (the versions the README names).
OTHER_VERSIONS = ("3.11", "3.12", "3.13")


def setup_cflags() -> list[str]:
    """setup.py's CFLAGS, read from its source (importing it would run setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CFLAGS":
            flags: list[str] = ast.literal_eval(node.value)
            return flags
    raise AssertionError("setup.py has no CFLAGS")


def include_dirs() -> dict[str, Path]:
    """This interpreter's headers, and each other version's where pyenv has them (the same
    headers once: the venv's interpreter is usually one of them)."""
    this = Path(sysconfig.get_paths()["include"]).resolve()
    found = {"this": this}
    for version in OTHER_VERSIONS:
        pattern = f".pyenv/versions/{version}.*/include/python{version}"
        for header in sorted(Path.home().glob(pattern)):
            if header.resolve() != this and (header / "Python.h").exists():
                found[version] = header
    return found


def test_no_c_file_is_longer_than_a_reader_can_hold() -> None:
    assert len(SOURCES) >= 10
    long = {p.name: n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("version", sorted(include_dirs()))
def test_every_c_file_compiles_without_a_warning(version: str) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    include = include_dirs()[version]
    flags = [*setup_cflags(), "-Werror", "-fsyntax-only", f"-I{include}"]

    def compile_one(source: Path) -> tuple[str, str]:
        done = subprocess.run(
            ["cc", *flags, str(source)], capture_output=True, text=True, check=False, timeout=120
        )
        return source.name, done.stderr.strip() or ("" if done.returncode == 0 else "failed")

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failed = {name: err[-1500:] for name, err in pool.map(compile_one, SOURCES) if err}
    assert failed == {}, f"against {include}"
