"""Issue 18's bar for the whole code base, so it stays met: every module under scripts/ says its job
in a docstring, none is over 500 lines and no function is over 80 (data tables are module-level
assignments, not functions, so they do not count against the second)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
MODULES = sorted(path for path in SCRIPTS.rglob("*.py") if "__pycache__" not in path.parts)
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _relative(path: Path) -> str:
    return str(path.relative_to(SCRIPTS))


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 50 and SCRIPTS / "rlkeep" / "pipeline.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_a_module_says_its_job_and_reads_in_one_sitting(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    if path.name != "__main__.py" and source.strip():
        assert ast.get_docstring(tree), f"{path}: no module docstring"
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{path}: {len(source.splitlines())} lines"
    long = [f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], f"{path}: functions over {MAX_FUNCTION_LINES} lines: {long}"
