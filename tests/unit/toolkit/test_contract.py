"""Each shared name is written once, in toolkit/contract.py: no other module of the
project's source spells its value out again, in a string or a bytes literal (an Envoy
substitution such as ``%REQ(X-REQUEST-ID)%``, a WSGI key, a help text naming a variable
are all derived from the constant). Docstrings, comments, the tests and the docs may
name them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from toolkit import contract

ROOT = Path(__file__).resolve().parents[3]
HOME = ROOT / "toolkit" / "contract.py"
NOT_SOURCE = {"tests", "docs"}

# Log fields named by OpenTelemetry itself (its log data model and semantic conventions):
# spans, resources, Jaeger's queries and the span file use the same standard names with
# their own meaning, so a literal of one is not a copy of our log line's contract.
OPENTELEMETRY_NAMES = {
    *("LOG_TIMESTAMP", "LOG_SEVERITY_TEXT", "LOG_SEVERITY_NUMBER", "LOG_BODY"),
    *("LOG_SERVICE_NAME", "LOG_TRACE_ID", "LOG_SPAN_ID", "LOG_TRACE_FLAGS"),
    *("LOG_HTTP_METHOD", "LOG_URL_PATH", "LOG_HTTP_ROUTE", "LOG_HTTP_STATUS"),
}
# Values that are ordinary words (``pool``, ``logger``, ``ours``): the same word is a JSON
# key or a setting elsewhere with another meaning.
ORDINARY_WORD = re.compile(r"[a-z]+")


def contract_values() -> dict[str, str]:
    """Constant name -> value, for every string the contract defines."""
    return {
        name: value
        for name, value in vars(contract).items()
        if name.isupper() and isinstance(value, str)
    }


def checked_values() -> dict[str, str]:
    return {
        name: value
        for name, value in contract_values().items()
        if name not in OPENTELEMETRY_NAMES and not ORDINARY_WORD.fullmatch(value)
    }


def source_files(root: Path = ROOT) -> list[Path]:
    """The project's Python source: its packages, not the tests or the docs."""
    packages = [p.parent for p in root.glob("*/__init__.py") if p.parent.name not in NOT_SOURCE]
    return sorted(f for package in packages for f in package.rglob("*.py") if f != HOME)


def literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of each string and bytes literal but docstrings; bytes as Latin-1."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, str):
                yield node.lineno, node.value
            elif isinstance(node.value, bytes):
                yield node.lineno, node.value.decode("latin-1")


def whole_name(value: str) -> re.Pattern[str]:
    """`value` as a whole name, in any letter case: ``x-request-id`` in
    ``%REQ(X-REQUEST-ID)%``, but not ``pricing_loop_lag_seconds`` in a longer name."""
    return re.compile(rf"(?<![\w.-]){re.escape(value)}(?![\w-]|\.\w)", re.IGNORECASE)


def copies(files: list[Path], root: Path = ROOT) -> set[tuple[str, str]]:
    """(path, constant name) of each literal that writes a checked value out again."""
    patterns = {name: whole_name(value) for name, value in checked_values().items()}
    found = set()
    for path in files:
        for _, text in literals(ast.parse(path.read_text(), str(path))):
            for name, regex in patterns.items():
                if regex.search(text):
                    found.add((path.relative_to(root).as_posix(), name))
    return found


def test_the_check_covers_the_contract() -> None:
    values = checked_values()
    assert {"PROBLEM_JSON", "REQUEST_ID_HEADER", "LOOP_LAG_SERIES", "POOL_ENV"} <= set(values)
    assert {"LOG_REQUEST_ID", "LOG_DURATION_MS", "POOL_ENV"} <= set(values)
    assert len(set(contract_values().values())) == len(contract_values())  # each value once
    files = source_files()
    assert ROOT / "pricing" / "web" / "problems.py" in files
    assert ROOT / "simulator" / "server.py" in files
    assert not [f for f in files if f.is_relative_to(ROOT / "tests")]


def test_no_shared_name_is_written_outside_its_home() -> None:
    found = copies(source_files())
    assert sorted(found) == []


def test_a_copy_is_found_in_each_form(tmp_path: Path) -> None:
    package = tmp_path / "somewhere"
    package.mkdir()
    (package / "__init__.py").write_text('"""A docstring may say x-request-id."""\n')
    (package / "media.py").write_text('A = "application/problem+json"\n')
    (package / "head.py").write_text('B = b"Content-Type: application/problem+json\\r\\n"\n')
    (package / "envoy.py").write_text('C = "%REQ(X-REQUEST-ID)%"\n')
    (package / "help.py").write_text('D = "with PRICING_TRACING=full"\n')
    (package / "fine.py").write_text(
        'E = f"{0}_bucket"\nF = "pricing_loop_lag_seconds_bucket"\nG = "x-request-ids"\n'
    )
    assert copies(source_files(tmp_path), tmp_path) == {
        ("somewhere/media.py", "PROBLEM_JSON"),
        ("somewhere/head.py", "PROBLEM_JSON"),
        ("somewhere/envoy.py", "REQUEST_ID_HEADER"),
        ("somewhere/help.py", "TRACING_ENV"),
    }
