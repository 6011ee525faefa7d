"""docs/cli.md is what `pricingctl`'s parsers say, every command and every flag."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from pricingctl import clidoc
from pricingctl.main import build_parser


def _flags_in_help(parser: argparse.ArgumentParser) -> set[str]:
    """The long flags `--help` lists as options (an option line starts with `-`)."""
    flags: set[str] = set()
    for line in parser.format_help().splitlines():
        invocation = re.match(r"^\s+(-[^ ].*?)(?:\s{2,}|$)", line)
        if invocation:
            flags.update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", invocation.group(1)))
    return flags


def test_the_committed_reference_is_current() -> None:
    committed = clidoc.DOC_PATH.read_text(encoding="utf-8") if clidoc.DOC_PATH.exists() else ""
    assert committed == clidoc.render(), (
        f"docs/cli.md is stale (the flags changed): run `{clidoc.REGENERATE}` "
        "(or `make docs`) and commit docs/cli.md"
    )


def test_every_command_and_flag_that_help_shows_is_on_the_page() -> None:
    """Checked against `--help` itself (public argparse), so a walker that missed a
    command or a flag fails here, whatever argparse's internals become."""
    page = clidoc.render()
    progs = [c.prog for c in clidoc.walk(build_parser())]
    for prog in ["pricingctl up", "pricingctl routes suggest", "pricingctl bench soak"]:
        assert prog in progs
    for command in clidoc.walk(build_parser()):
        level = "##" if command.prog.count(" ") <= 1 else "###"
        heading = f"\n{level} `{command.prog}`\n"
        assert heading in page, command.prog
        section = page.split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
        for flag in _flags_in_help(command.parser):
            if flag != "--help":
                assert f"`{flag}" in section or f", {flag}" in section, (command.prog, flag)
        for name, _help in command.children:
            assert f"(#{clidoc.anchor(command.prog + ' ' + name)})" in section


def test_the_page_reads_the_same_in_every_clone() -> None:
    page = clidoc.render()
    assert str(clidoc.PROJECT_ROOT) not in page
    assert "| `--run-dir RUN_DIR` | `.run` |" in page


def test_a_new_flag_shows_with_its_default_and_help() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    go = sub.add_parser("go", help="go somewhere | fast")
    go.add_argument("--speed-ms", type=float, default=2.5, help="how fast (default %(default)s)")
    go.add_argument("--hidden", help=argparse.SUPPRESS)
    page = clidoc.render(parser)
    assert "- [`tool go`](#tool-go): go somewhere | fast" in page
    assert "| [`tool go`](#tool-go) | go somewhere \\| fast |" in page
    assert "| `--speed-ms SPEED_MS` | `2.5` | how fast (default 2.5) |" in page
    assert "--hidden" not in page


def test_check_says_stale_and_how_to_regenerate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.md"
    out.write_text("old\n", encoding="utf-8")
    assert clidoc.main(["--check", "--out", str(out)]) == 1
    assert clidoc.REGENERATE in capsys.readouterr().err
    assert clidoc.main(["--out", str(out)]) == 0
    assert clidoc.main(["--check", "--out", str(out)]) == 0


_CODE_SPAN = re.compile(r"`([^`]+)`")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _shown_command_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the code a page shows: fenced blocks and `spans`."""
    shown: list[tuple[int, str]] = []
    in_block = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_block = not in_block
            continue
        if in_block:
            shown.append((number, line.split(" #", 1)[0]))
        else:
            shown += [(number, span) for span in _CODE_SPAN.findall(line)]
    return shown


def wrong_commands(text: str, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """Each `pricingctl ...` the text shows whose command or long flag does not exist.

    The command is the longest run of sub-command names after `pricingctl`; every
    `--flag` after it, up to the next `;`, `|`, `&&` or `(`, must be one of its options.
    """
    tree = {c.prog: c for c in clidoc.walk(parser or build_parser())}
    problems = []
    for number, line in _shown_command_lines(text):
        for match in re.finditer(r"(?<![\w-])pricingctl((?: [^;|&(]*)?)", line):
            prog, words = "pricingctl", match.group(1).split()
            while words and f"{prog} {words[0]}" in tree:
                prog = f"{prog} {words.pop(0)}"
            options = {s for a in tree[prog].parser._actions for s in a.option_strings}
            for word in words:
                flag = word.strip("[]").split("=", 1)[0]
                if flag.startswith("--") and flag not in options:
                    problems.append(f"{number}: `{prog}` has no {flag}")
    return problems


def _pages() -> list[Path]:
    docs = clidoc.PROJECT_ROOT / "docs"
    return [clidoc.PROJECT_ROOT / "README.md", *sorted(docs.glob("*.md"))]


def test_every_pricingctl_command_the_docs_show_exists() -> None:
    """A renamed flag or command fails here until the pages that show it follow."""
    problems = [
        f"{page.relative_to(clidoc.PROJECT_ROOT)}:{problem}"
        for page in _pages()
        for problem in wrong_commands(page.read_text(encoding="utf-8"))
    ]
    assert not problems, "commands the docs show that pricingctl does not have:\n" + "\n".join(
        problems
    )


def test_a_misspelt_flag_in_the_docs_is_caught() -> None:
    parser = argparse.ArgumentParser(prog="pricingctl")
    sub = parser.add_subparsers()
    sub.add_parser("up").add_argument("--layout")
    traces = sub.add_parser("traces")
    traces.add_argument("--json", action="store_true")
    traces.add_argument("--from-jaeger")
    routes = sub.add_parser("routes").add_subparsers()
    routes.add_parser("check").add_argument("--config")
    routes.add_parser("render")
    text = (
        "Run `pricingctl traces --json` and `pricingctl routes check --config F`.\n"
        "```sh\n.venv/bin/pricingctl traces --from-jaeger http://x  # --not-this\n```\n"
        "`pricingctl up --layuot shared`, `pricingctl routes render --no-such`\n"
    )
    assert wrong_commands(text, parser) == [
        "5: `pricingctl up` has no --layuot",
        "5: `pricingctl routes render` has no --no-such",
    ]
