"""Every relative link in README.md, BENCHMARKS.md and docs/ leads somewhere: the file exists, and a
`#anchor` names a heading of the page it points to, slugged as GitHub slugs it.

Links with a scheme (https:, mailto:) are not followed: this test needs no network.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)"
)
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
_HTML_ANCHOR = re.compile(r"""<a\s+[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']""")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    """README.md, every page under docs/, and BENCHMARKS.md, which the docs link for
    the figures (its links into docs/benchmarks/ included)."""
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0] * len(opened.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (no markup), lower-cased,
    every character but letters, digits, spaces, `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one gets -1, -2, ...)
    and explicit `<a id=...>` / `<a name=...>`."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    previous = ""
    for _number, line in _prose_lines(path.read_text(encoding="utf-8")):
        text = None
        atx = _ATX.match(line)
        if atx:
            text = atx.group(2)
        elif _SETEXT.match(line) and previous.strip() and not previous.lstrip().startswith("|"):
            text = previous.strip()
        if text is not None:
            base = slug(text)
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(_HTML_ANCHOR.findall(line))
        previous = line
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in a page's prose (code is not linked)."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        prose = _CODE_SPAN.sub("", line)
        targets = [m.group(2) for m in _INLINE_LINK.finditer(prose)]
        targets += _HTML_LINK.findall(prose)
        ref = _REF_DEF.match(prose)
        if ref:
            targets.append(ref.group(1))
        found += [(number, t.strip("<>")) for t in targets]
    return found


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of `path`, one line each."""
    problems = []
    where = path.relative_to(root)
    for number, target in links(path):
        if _SCHEME.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where}:{number}: {target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and unquote(fragment) not in anchors(dest):
            problems.append(f"{where}:{number}: {target}: no heading #{fragment} there")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    problems = broken(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


# The checker checks itself: a test that cannot fail is no test.


def test_slugs_are_githubs(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Past capacity: what a client sees under overload\n"
        "## `pricingctl routes render`\n"
        "## Traces\n## Traces\n"
        "```\n# not a heading\n```\n"
        "Setext heading\n---\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "past-capacity-what-a-client-sees-under-overload",
        "pricingctl-routes-render",
        "traces",
        "traces-1",
        "setext-heading",
    }


def test_a_missing_file_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Here\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#here) [gone](missing.md) [bad](there.md#nowhere) [self](#top)\n"
        "`[in code](missing2.md)` [web](https://example.com/x.md)\n"
        "```\n[in a block](missing3.md)\n```\n"
        "# Top\n",
        encoding="utf-8",
    )
    assert broken(page, root=tmp_path) == [
        "page.md:1: missing.md: no such file",
        "page.md:1: there.md#nowhere: no heading #nowhere there",
    ]
