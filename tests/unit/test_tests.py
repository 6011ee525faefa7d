"""How the tests themselves are put together, as Flask's tutorial does it: conftest
files hold fixtures only, which pytest hands to the tests; the helpers the tests call
live in `support` packages (and `tests.samples`, `tests.prometheus`); no module imports
a test module or a conftest. Imports inside functions count, and so do the scripts a
test hands a subprocess as a string."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported(tree: ast.AST, importer: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in `tree`; `from a import b` yields a and a.b (b
    may be a module). Relative imports are resolved against `importer`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = importer.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def scripts(tree: ast.AST) -> Iterator[ast.Module]:
    """The string constants that are Python code with an import (subprocess scripts)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "import " not in node.value:
                continue
            try:
                yield ast.parse(node.value)
            except SyntaxError:
                continue


def forbidden(module: str) -> bool:
    """A conftest, or a test module of this repository."""
    parts = module.split(".")
    if "conftest" in parts:
        return True
    return parts[0] == "tests" and parts[-1].startswith("test_")


def bad_imports(source: str, importer: str) -> list[str]:
    """What `source` imports that it may not, one line per import statement."""
    tree = ast.parse(source)
    found: dict[str, str] = {}
    codes = [("line", tree)]
    codes += [(f"script {i}, line", script) for i, script in enumerate(scripts(tree), 1)]
    for where, code in codes:
        for line, name in imported(code, importer):
            if forbidden(name):
                found.setdefault(f"{where} {line}", name)
    return [f"{where}: {name}" for where, name in found.items()]


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    paths = sorted(TESTS.rglob("*.py"))
    assert len(paths) > 100  # the walk sees the tests
    problems = {}
    for path in paths:
        if path == Path(__file__):  # its examples of what is refused
            continue
        found = bad_imports(path.read_text(), module_name(path))
        if found:
            problems[str(path.relative_to(ROOT))] = found
    assert problems == {}, "move what they share into a support module or a fixture"


def is_fixture(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("pytest.fixture", "fixture"):
            return True
    return False


def not_fixtures(source: str) -> list[str]:
    """The top-level functions and classes of a conftest that are neither fixtures nor
    pytest's hooks (`pytest_*`); a private `_helper` of its fixtures is let be."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
        and not node.name.startswith(("_", "pytest_"))
        and not (isinstance(node, ast.FunctionDef) and is_fixture(node))
    ]


def test_conftest_files_hold_fixtures_only() -> None:
    found = {
        str(path.relative_to(ROOT)): not_fixtures(path.read_text())
        for path in sorted(TESTS.rglob("conftest.py"))
    }
    assert len(found) >= 3
    assert {path: names for path, names in found.items() if names} == {}, (
        "helpers the tests call live in a support module"
    )
    assert not_fixtures("def http(): ...\nclass Fake: ...\ndef pytest_addoption(): ...") == [
        "http",
        "Fake",
    ]
    assert (
        not_fixtures("@pytest.fixture\ndef a(): ...\n@pytest.fixture(scope='module')\ndef b(): ...")
        == []
    )


def test_the_check_sees_each_way_of_importing() -> None:
    importer = "tests.unit.pricing.web.test_offers"
    for source in (
        "from tests.integration.conftest import http",
        "from tests.integration import conftest",
        "import tests.unit.conftest",
        "from .conftest import x",
        "from ..conftest import x",
        "from tests.integration.test_overload import open_loop",
        "from tests.integration import test_overload",
        "from . import test_meta",
        "def f():\n    from tests.unit.tracing.test_client import x",
        'SCRIPT = """\nimport json\nfrom tests.unit.test_layers import ROOT\n"""',
    ):
        assert bad_imports(source, importer), source
    for source in (
        "from tests.integration.support.http import http",
        "from tests.samples import RIDE",
        "import pytest",
        "from . import support",
        'TEXT = "the import of a test_ module"',
    ):
        assert not bad_imports(source, importer), source
