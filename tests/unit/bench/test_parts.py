"""One door into the benchmark: every part is a `pricingctl bench <part>` listed in
`pricingctl bench --help`, and no module of `bench/` is a command of its own."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from pricingctl.main import build_parser

ROOT = Path(__file__).resolve().parents[3]
PARTS = {
    *("envoy-hop", "io-capacity", "tracing-overhead", "overload"),
    *("http-client", "timing-accuracy", "timing-cost", "span-cost", "log-cost"),
    *("metrics-cost", "soak", "suggest", "routes-scale", "instructions"),
    *("baseline", "faults"),
}


def bench_parser() -> argparse.ArgumentParser:
    root = build_parser()
    commands = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["bench"]


def test_every_part_is_a_subcommand_listed_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_parser()
    parts = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    assert set(parts.choices) == PARTS
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    listed = capsys.readouterr().out
    for part in PARTS:
        assert f"    {part}" in listed, part


def test_no_bench_module_is_a_command_of_its_own() -> None:
    """No `python -m bench.x` side door: no module of the benchmark runs as __main__."""
    doors = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Name)
                and node.left.id == "__name__"
            ):
                doors.append(str(path.relative_to(ROOT)))
    assert doors == []
