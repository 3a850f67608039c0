"""The core has no knot: the record model (rlkeep.records) knows no scheduler and no step table, and
no import cycle joins records, kinds, pipeline, the step context, the runner, regions (the transfer
check) and the scheduler package. Read from the source (every import a process can run, at the top
or inside a function; TYPE_CHECKING blocks are for type checkers only), followed through every
rlkeep module in between.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scripts" / "rlkeep"
CORE = ("rlkeep.records", "rlkeep.kinds", "rlkeep.pipeline", "rlkeep.context", "rlkeep.runner", "rlkeep.regions",
        "rlkeep.scheduler")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The rlkeep modules `path` imports when it runs (a package import runs the package's __init__)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for child in node.body for inner in ast.walk(child)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    found = set()
    for name in names:
        parts = name.split(".")
        found |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & modules  # each package on the way
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: runtime_imports(path, set(paths)) - {name} for name, path in paths.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def group_of(module: str) -> str | None:
    return next((core for core in CORE if module == core or module.startswith(core + ".")), None)


def test_the_record_model_imports_no_scheduler_and_no_step_table() -> None:
    graph = import_graph()
    reached = {group_of(name) for name in reachable(graph, "rlkeep.records")} - {None}
    assert reached == {"rlkeep.kinds"}, sorted(reachable(graph, "rlkeep.records"))


def test_no_import_cycle_joins_the_core_modules() -> None:
    graph = import_graph()
    reaches = {core: {group_of(name) for name in set().union(*(reachable(graph, m) | {m} for m in graph
                                                                   if group_of(m) == core))} - {None, core}
               for core in CORE}
    cycles = sorted((a, b) for a in CORE for b in reaches[a] if a in reaches[b] and a < b)
    assert cycles == [], cycles


def test_the_graph_reader_sees_imports_inside_functions_and_skips_type_checking(tmp_path: Path) -> None:
    """Guards the reader itself: a cycle hidden in a deferred import still counts."""
    source = tmp_path / "probe.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlkeep.context import StepContext\n"
                      "def f():\n    from rlkeep.scheduler.named import SCHEDULERS\n")
    assert runtime_imports(source, {"rlkeep.context", "rlkeep.scheduler", "rlkeep.scheduler.named"}) == {
        "rlkeep.scheduler", "rlkeep.scheduler.named"}
