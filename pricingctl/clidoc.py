"""docs/cli.md, written from the parsers `pricingctl` itself runs, so the reference
cannot drift from the flags.

    python -m pricingctl.clidoc           # rewrite docs/cli.md (also: make docs)
    python -m pricingctl.clidoc --check   # exit 1 when docs/cli.md is stale

`tests/unit/pricingctl/test_clidoc.py` fails when the committed page differs from
what this writes. argparse has no public way to list a parser's arguments or its
sub-commands, so `walk` and `_rows` read what `format_help` itself reads
(`parser._actions`, `_SubParsersAction.choices` and `._choices_actions`); if a
Python release moves them, that test fails first.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pricingctl.main import build_parser

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = PROJECT_ROOT / "docs" / "cli.md"
REGENERATE = "python -m pricingctl.clidoc"
# The usage lines are wrapped as `--help` wraps them in a terminal this wide; fixed,
# so the page does not depend on the terminal it was generated in.
USAGE_WIDTH = 88


@dataclass(frozen=True)
class Command:
    """One parser of the tree: `pricingctl`, `pricingctl routes`, `pricingctl routes render`."""

    prog: str
    summary: str  # the parent's one-line help for it ("" for the root)
    parser: argparse.ArgumentParser
    children: tuple[tuple[str, str], ...]  # (name, one-line help) of its sub-commands


def walk(parser: argparse.ArgumentParser, summary: str = "") -> Iterator[Command]:
    """Every parser under `parser`, itself first, sub-commands in the order they were
    added (depth first). Aliases are not repeated."""
    children: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a, parser.prog) for a in action._choices_actions}
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) in seen:
                    continue
                seen.add(id(child))
                children.append((name, helps.get(name, ""), child))
    yield Command(parser.prog, summary, parser, tuple((n, h) for n, h, _ in children))
    for _name, help_text, child in children:
        yield from walk(child, help_text)


def anchor(prog: str) -> str:
    """The slug GitHub gives the heading `prog` gets on the page."""
    return prog.replace(" ", "-").lower()


def _text(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    """`text` inside a table row, whose cells `|` would end."""
    return _text(text).replace("|", "\\|")


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        meta = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        meta = "{" + ",".join(str(c) for c in action.choices) + "}"
    elif action.option_strings:
        meta = action.dest.upper()
    else:
        meta = action.dest
    nargs = action.nargs
    if nargs == 0:
        return ""
    if nargs == "?":
        return f"[{meta}]"
    if nargs == "*":
        return f"[{meta} ...]"
    if nargs == "+":
        return f"{meta} [{meta} ...]"
    if isinstance(nargs, int):
        return " ".join([meta] * nargs)
    return meta


def _default(action: argparse.Action) -> str:
    """The default as the page shows it: a path inside the checkout relative to it, so
    the page reads the same in every clone; nothing for flags and empty defaults."""
    value = action.default
    if action.nargs == 0 or value is None or value == argparse.SUPPRESS or value == {}:
        return ""
    if isinstance(value, Path) and value.is_relative_to(PROJECT_ROOT):
        text = str(value.relative_to(PROJECT_ROOT))
    elif isinstance(value, dict):
        text = ",".join(f"{k}={v}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    return f"`{text}`" if text else '`""`'


def _help(action: argparse.Action, prog: str) -> str:
    """The help as `--help` prints it: argparse expands %(default)s, %(prog)s, ... and
    %% in every help string, a sub-command's one-line help included."""
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(c) for c in params["choices"])
        text = text % params
    return _text(text)


def _rows(command: Command) -> list[str]:
    rows = []
    for action in command.parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        flag = ", ".join(action.option_strings) or action.dest
        meta = _metavar(action) if action.option_strings else ""
        name = f"`{flag} {meta}`" if meta else f"`{_metavar(action) or flag}`"
        rows.append(
            f"| {_cell(name)} | {_default(action)} | {_cell(_help(action, command.prog))} |"
        )
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().rstrip()


def _section(command: Command) -> list[str]:
    level = "##" if command.prog.count(" ") <= 1 else "###"
    lines = [f"{level} `{command.prog}`", ""]
    about = command.parser.description or command.summary
    if about:
        lines += [_text(about), ""]
    lines += ["```", _usage(command.parser), "```", ""]
    rows = _rows(command)
    if rows:
        lines += ["| option | default | what |", "|---|---|---|", *rows, ""]
    if command.children:
        lines += ["| command | what |", "|---|---|"]
        for name, help_text in command.children:
            prog = f"{command.prog} {name}"
            lines.append(f"| [`{prog}`](#{anchor(prog)}) | {_cell(help_text)} |")
        lines.append("")
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole page, from `parser` (default: `pricingctl`'s own)."""
    commands = list(walk(parser or build_parser()))
    lines = [
        "<!-- Generated from pricingctl's argparse parsers by "
        f"`{REGENERATE}` (or `make docs`); do not edit. -->",
        "",
        "# The `pricingctl` command reference",
        "",
        "Every command, its flags and their defaults, as `pricingctl ... --help` prints "
        "them. Every command also takes `-h`/`--help`. Flags follow the command they "
        "belong to (`pricingctl routes check --config F`). Exit codes: 0 done, 1 it could "
        "not be done (one line says why), 2 bad flags. After `make run` or `make test` the "
        "command is `.venv/bin/pricingctl` (`. .venv/bin/activate` puts it on your PATH).",
        "",
        "Commands:",
        "",
    ]
    for command in commands[1:]:
        indent = "  " * (command.prog.count(" ") - 1)
        summary = f": {command.summary}" if command.summary else ""
        lines.append(f"{indent}- [`{command.prog}`](#{anchor(command.prog)}){summary}")
    lines.append("")
    for command in commands:
        lines += _section(command)
    # Defaults written into help texts name paths inside the checkout: shown relative
    # to it, so the page is the same in every clone.
    text = "\n".join(lines).replace(f"{PROJECT_ROOT}/", "")
    return text.rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pricingctl.clidoc",
        description=f"Write {DOC_PATH.name} (the command reference) from pricingctl's parsers.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="where the page goes")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
