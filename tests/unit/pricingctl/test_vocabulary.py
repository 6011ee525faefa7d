"""One CLI vocabulary, every value checked at the door: the parsers of every command
(sub-commands included, recursively) are walked, so a new flag is held to the same
rules as the old ones.

- one meaning, one flag name, in every command (`MEANINGS`), and no flag with two names;
- every command that prints a report has `--json` (`NO_REPORT` says why the others
  have none);
- every value-taking flag and argument refuses `nan`, `inf`, `-1`, `1e400` and `''`
  with one line on stderr and exit 2 (`ACCEPTS` lists the few values a flag rightly
  takes, and checks that it does).

Parse only: nothing runs, nothing is written.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pricingctl import argtypes
from pricingctl.main import build_parser

Command = tuple[str, ...]


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(
    parser: argparse.ArgumentParser, path: Command = ()
) -> Iterator[tuple[Command, argparse.ArgumentParser]]:
    yield path, parser
    for name, sub in _subparsers(parser):
        yield from _walk(sub, (*path, name))


#: Every parser that runs something (it has a handler), by its command words.
ROOT = build_parser()  # one for the module: parsing leaves a parser as it was
PARSERS = dict(_walk(ROOT))
COMMANDS = {path: parser for path, parser in PARSERS.items() if "handler" in parser._defaults}


def _own_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(
            a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
        )
    ]


def _takes_a_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _label(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def test_the_walk_sees_every_command() -> None:
    names = {" ".join(path) for path in COMMANDS}
    for expected in (
        "up",
        "down",
        "reload",
        "traces",
        "routes render",
        "routes suggest",
        "routes synth",
        "deploy render",
        "deploy size",
        "bench",
        "bench io-capacity",
    ):
        assert expected in names


# --- one meaning, one name ---------------------------------------------------------


@dataclass(frozen=True)
class Meaning:
    flag: str
    #: The shared type of the meaning (`pricingctl.argtypes`); None: a switch.
    type: Callable[[str], object] | None
    #: Whether an action means this (also catches a second name for it).
    means: Callable[[argparse.Action], bool]


def _dest_in(*names: str) -> Callable[[argparse.Action], bool]:
    return lambda a: a.dest in names


MEANINGS = {
    "output (file or directory)": Meaning(
        "--out",
        argtypes.output,
        lambda a: (
            a.type is argtypes.output
            or a.dest in {"out", "output", "out_dir", "output_dir", "outdir"}
            or "-o" in a.option_strings
        ),
    ),
    "a JSON document on stdout": Meaning(
        "--json", None, lambda a: "json" in a.dest or any("json" in o for o in a.option_strings)
    ),
    "the route config": Meaning(
        "--config",
        argtypes.routes_file,
        lambda a: (
            a.type is argtypes.routes_file
            or a.dest in {"config", "routes_file", "route_config", "routes_config", "routes_toml"}
        ),
    ),
    "Jaeger's query URL": Meaning(
        "--from-jaeger",
        argtypes.jaeger_url,
        # `up --jaeger auto|on|off` is a mode, not a URL: it has choices.
        lambda a: a.type is argtypes.jaeger_url or ("jaeger" in a.dest and a.choices is None),
    ),
    "the pools' /metrics URLs": Meaning(
        "--from-metrics",
        argtypes.metrics_url,
        lambda a: a.type is argtypes.metrics_url or "metrics" in a.dest,
    ),
    "an OTLP span file": Meaning(
        "--from-spans",
        argtypes.span_file,
        lambda a: a.type is argtypes.span_file or a.dest in {"file", "spans", "span_file"},
    ),
    "the stack's run directory": Meaning(
        "--run-dir", argtypes.path, _dest_in("run_dir", "rundir", "logs_dir")
    ),
    "a seed": Meaning("--seed", argtypes.seed, lambda a: "seed" in a.dest),
}


def _options() -> Iterator[tuple[Command, argparse.Action]]:
    for path, parser in PARSERS.items():
        for action in _own_actions(parser):
            if action.option_strings:
                yield path, action


@pytest.mark.parametrize("meaning", sorted(MEANINGS))
def test_one_meaning_has_one_flag_name_everywhere(meaning: str) -> None:
    spec = MEANINGS[meaning]
    found = [(path, a) for path, a in _options() if spec.means(a)]
    assert found, f"no command has {spec.flag}: is the table stale?"
    for path, action in found:
        where = f"pricingctl {' '.join(path)}"
        assert action.option_strings == [spec.flag], f"{where}: {meaning} is {spec.flag}"
        if spec.type is not None:
            assert action.type is spec.type, (
                f"{where} {spec.flag}: the type of {meaning} in argtypes"
            )
        else:
            assert isinstance(action, argparse._StoreTrueAction), f"{where} {spec.flag}"


def test_a_canonical_name_means_nothing_else() -> None:
    for path, action in _options():
        for meaning, spec in MEANINGS.items():
            if spec.flag in action.option_strings:
                assert spec.means(action), f"pricingctl {' '.join(path)} {spec.flag}: {meaning}"


_PORT_FLAG = re.compile(r"--([a-z]+-)*port")


def test_port_flags_are_named_port_and_typed_as_ports() -> None:
    ports = [
        (path, a)
        for path, a in _options()
        if a.type is argtypes.port or a.dest.endswith("port") or "port" in a.option_strings[0]
    ]
    assert {a.option_strings[0] for _, a in ports} >= {"--port", "--simulator-port"}
    for path, action in ports:
        where = f"pricingctl {' '.join(path)} {action.option_strings}"
        assert len(action.option_strings) == 1 and _PORT_FLAG.fullmatch(action.option_strings[0])
        assert action.type is argtypes.port, where


def test_no_flag_has_two_names() -> None:
    for path, action in _options():
        assert len(action.option_strings) == 1, (path, action.option_strings)


def test_no_value_is_taken_unchecked() -> None:
    """A raw int, float, str or Path type takes `nan`, `-1` or `''` as they come."""
    for path, parser in PARSERS.items():
        for action in _own_actions(parser):
            if not _takes_a_value(action) or action.choices is not None:
                continue
            where = f"pricingctl {' '.join(path)} {_label(action)}"
            assert action.type not in (None, int, float, str, Path), where


# --- reports have --json ------------------------------------------------------------

#: Commands that print no report, and what they print instead.
NO_REPORT = {
    ("up",): "runs the stack: one line with its URLs, then waits",
    ("down",): "an operation: one line when the stack is stopped",
    ("reload",): "an operation: a progress line per pool",
    ("routes", "render"): "writes envoy.yaml: one line naming it",
    ("routes", "check"): "a check: its exit code is the answer, each problem one line",
    ("routes", "apply"): "an operation: a progress line per step",
    ("routes", "synth"): "writes a synthetic service: one line naming its files",
    ("deploy", "render"): "writes a folder: one line naming it",
}
#: `bench` and its parts write their results as JSON to --out; they print a summary.
BENCH = ("bench",)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_that_prints_a_report_has_json(path: Command) -> None:
    flags = {o for a in _own_actions(COMMANDS[path]) for o in a.option_strings}
    if path in NO_REPORT:
        assert "--json" not in flags, f"{path} has --json now: take it out of NO_REPORT"
    elif path[:1] == BENCH:
        assert "--out" in flags, f"pricingctl {' '.join(path)}: its JSON goes to --out"
    else:
        assert "--json" in flags, f"pricingctl {' '.join(path)} prints a report: --json"


# --- every value checked at the door --------------------------------------------------

BAD_VALUES = ("nan", "inf", "-1", "1e400", "")

#: Flags (and arguments) that rightly take some of BAD_VALUES, and why.
_A_NAME = {"nan", "inf", "1e400"}
ACCEPTS: dict[str, tuple[set[str], str]] = {
    "--out": (_A_NAME, "a file or folder may be called so; it is created"),
    "--run-dir": (_A_NAME, "a folder may be called so; it is created"),
    "--xds-dir": (_A_NAME, "a folder may be called so; it is created"),
    "--heapwatch": (_A_NAME, "a folder may be called so; it is created"),
    "--service": (_A_NAME, "service.name is free text (Jaeger finds none: exit 1)"),
    "pool": (_A_NAME, "a pool's name; the running stack says which exist (exit 1)"),
    "--trace-id": ({"1e400"}, "hexadecimal digits: a trace id Jaeger can look up"),
}

#: What each command needs besides the flag under test, to parse.
REQUIRED: dict[Command, list[str]] = {
    ("routes", "synth"): ["--routes", "4", "--out", "synth"],
    ("routes", "suggest"): ["--from-spans", "spans.jsonl"],
    ("deploy", "size"): ["--offers-per-s", "10"],
    ("deploy", "render"): ["kubernetes"],
}


def _exclusive_with(parser: argparse.ArgumentParser, action: argparse.Action) -> set[str]:
    out: set[str] = set()
    for group in parser._mutually_exclusive_groups:
        if action in group._group_actions:
            out.update(o for a in group._group_actions for o in a.option_strings)
    return out


def _argv(path: Command, action: argparse.Action, value: str) -> list[str]:
    parser = COMMANDS[path]
    required = list(REQUIRED.get(path, []))
    drop = _exclusive_with(parser, action) | set(action.option_strings)
    base: list[str] = []
    i = 0
    while i < len(required):
        word = required[i]
        if word.startswith("--"):
            if word not in drop:
                base += required[i : i + 2]
            i += 2
        else:
            if action.option_strings:  # a positional stays unless it is under test
                base.append(word)
            i += 1
    if action.option_strings:
        return [*path, *base, action.option_strings[0], value]
    return [*path, *base, value]


CASES = [
    (path, action.dest, value)
    for path, parser in sorted(COMMANDS.items())
    for action in _own_actions(parser)
    if _takes_a_value(action)
    for value in BAD_VALUES
]


@pytest.fixture
def in_empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory but for the files REQUIRED names: no file is called
    `nan`, so an input file flag must refuse it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spans.jsonl").write_text("")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "dest", "value"), CASES, ids=[f"{' '.join(p)} {d}={v!r}" for p, d, v in CASES]
)
@pytest.mark.usefixtures("in_empty_dir")
def test_a_bad_value_is_one_line_and_exit_2(
    path: Command, dest: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    action = next(a for a in _own_actions(COMMANDS[path]) if a.dest == dest)
    label = _label(action)
    argv = _argv(path, action, value)
    accepted, why = ACCEPTS.get(label, (set(), ""))
    if value in accepted:  # and it must parse: the exemption is still true
        args = ROOT.parse_args(argv)
        assert getattr(args, dest) is not None, why
        return
    with pytest.raises(SystemExit) as exc:
        ROOT.parse_args(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2, argv
    assert out == ""
    assert err.count("\n") == 1, err
    prefix = f"pricingctl {' '.join(path)}: error: argument {label}"
    assert err.startswith(prefix), (argv, err)


def test_the_exemptions_name_real_flags() -> None:
    labels = {_label(a) for parser in COMMANDS.values() for a in _own_actions(parser)}
    assert set(ACCEPTS) <= labels


@pytest.mark.parametrize(
    "argv",
    [
        ["deploy", "render", "kubernetes", "--offers-per-s", "nan"],
        ["deploy", "render", "kubernetes", "--offers-per-s", "-1"],
        ["routes", "suggest", "--from-jaeger", ""],
        ["up", "--simulator-port", "-1"],
    ],
)
def test_the_installed_command_refuses_in_one_line(argv: list[str], tmp_path: Path) -> None:
    """End to end, as a user runs it: the issue's own examples."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pricingctl", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())  # nothing written
