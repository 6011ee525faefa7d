"""No function in the project's packages is longer than a screen and a half
(``MAX_LINES``): a longer one mixes what should be separate pieces (issues 38 and 39
found a 259-line ``__init__`` of closures and a 121-line Envoy renderer). Nested
functions count on their own and inside their parent. Tests are not held to it."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
ROOT = Path(__file__).resolve().parents[2]
#: Every package of the project's own code: a top-level folder with an __init__.py.
PACKAGES = sorted(p for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests")


def long_functions(root: Path, limit: int) -> list[str]:
    """``path:line name (n lines)`` of every function in *root*'s Python files longer
    than *limit* lines, decorators included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{first} {node.name} ({lines} lines)")
    return found


def test_no_function_in_the_project_is_over_the_limit() -> None:
    assert {p.name for p in PACKAGES} >= {"pricing", "routing", "tracing", "bench"}
    assert [f for package in PACKAGES for f in long_functions(package, MAX_LINES)] == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"@staticmethod\ndef long() -> None:\n{body}\n")
    (tmp_path / "short.py").write_text("def short() -> None:\n    pass\n")
    assert long_functions(tmp_path, MAX_LINES) == [
        f"{tmp_path.name}/long.py:1 long ({MAX_LINES + 2} lines)"
    ]
