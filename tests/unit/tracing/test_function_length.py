"""No function under tracing/ is longer than a screen and a half (``MAX_LINES``): a
longer one mixes what should be separate pieces (issue 38 found a 259-line
``__init__`` of closures). Nested functions count on their own and inside their
parent."""

from __future__ import annotations

import ast
from pathlib import Path

import tracing

MAX_LINES = 80
ROOT = Path(tracing.__file__).parent


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


def test_no_function_under_tracing_is_over_the_limit() -> None:
    assert long_functions(ROOT, MAX_LINES) == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"@staticmethod\ndef long() -> None:\n{body}\n")
    (tmp_path / "short.py").write_text("def short() -> None:\n    pass\n")
    assert long_functions(tmp_path, MAX_LINES) == [
        f"{tmp_path.name}/long.py:1 long ({MAX_LINES + 2} lines)"
    ]
