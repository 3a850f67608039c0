"""Modules cut by what they do (issue 51): no import circle anywhere in scripts/rlkeep, and no import
that climbs from a lower layer to a higher one.

Every import counts: at the top, inside a function, and under `if TYPE_CHECKING:` (a circle a type
checker needs is still a circle a reader has to hold in their head). `from p import name` is an
import of the module `p.name` when there is one, else of `p`; reaching `p.q` runs the package
`p`'s __init__ first, but that is not an import of the package's own names, so it is not counted.

The layers, lowest first, are in LAYERS below (one place); docs/layout.md draws them.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scripts" / "rlkeep"

# Each layer: the modules (a name covers a package and everything under it, the longest name
# matching wins) and its role. A module may import from its own layer and every layer below.
# `.step` and `.cli` modules of every package belong to the layers named "steps" and "edge":
# a package's step and command line sit on top of its logic.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("rlkeep.errors", "rlkeep.jsonio", "rlkeep.hashing", "rlkeep.readable", "rlkeep.jsonskim",
                "rlkeep.urls", "rlkeep.waits", "rlkeep.kinds", "rlkeep.profiles", "rlkeep.chain_recapture",
                "rlkeep.batch_errors", "rlkeep.vllm_stats", "rlkeep.attempt_logs", "rlkeep.run_report",
                "rlkeep.folderstate", "rlkeep.tracker", "rlkeep.diskspace", "rlkeep.export.layout",
                "rlkeep.retrying")),
    ("model", ("rlkeep.records", "rlkeep.context", "rlkeep.pipeline")),
    ("transport", ("rlkeep.storage", "rlkeep.world", "rlkeep.regions", "rlkeep.tarstream", "rlkeep.scheduler",
                   "rlkeep.hub.calls", "rlkeep.hub.ratelimits", "rlkeep.hub.target", "rlkeep.hub.failures",
                   "rlkeep.hub.transfer", "rlkeep.hub.client", "rlkeep.hub.trees",
                   "rlkeep.redaction")),
    ("domain", ("rlkeep.sync", "rlkeep.archive", "rlkeep.export", "rlkeep.traces", "rlkeep.hub",
                "rlkeep.checkpoints", "rlkeep.metrics", "rlkeep.generation_stats", "rlkeep.registry",
                "rlkeep.reclaim", "rlkeep.audit", "rlkeep.restore", "rlkeep.report", "rlkeep.settled",
                "rlkeep.stepstate", "rlkeep.campaign")),
    ("steps", ()),  # every `<package>.step` module
    ("edge", ("rlkeep.runner", "rlkeep.step_cli", "rlkeep.cli", "rlkeep.__main__", "rlkeep.invocation",
              "rlkeep.snakemake_process", "rlkeep.audit_run")),  # and every `<package>.cli` module
)
LAYER_NAMES = [name for name, _ in LAYERS]

# Circles other helpers of issue 51 are removing at the same time; each is checked to still be a
# circle (so the entry goes when it does) and nothing else may be one.
# DELETE AT MERGE: storage/multipart <-> storage/s3 is helper D's (issue 51, storage/).
KNOWN_CIRCLES_OF_OTHER_HELPERS: tuple[frozenset[str], ...] = (
    frozenset({"rlkeep.storage.multipart", "rlkeep.storage.s3"}),  # helper D, issue 51
)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The rlkeep modules the module `name` imports anywhere in `source` (type-only imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found |= {f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                      for alias in node.names}
    return (found & modules) - {name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    paths = {module_name(path, package): path for path in package.rglob("*.py")}
    return {name: imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", set(paths))
            for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Every set of modules that reach each other through imports (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def one_cycle(graph: dict[str, set[str]], members: Iterable[str]) -> list[str]:
    """One path around a circle, for the failure message: a -> b -> ... -> a."""
    inside = set(members)
    start = min(inside)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for child in sorted(graph[node] & inside):
            if child == start:
                return paths[node] + [start]
            if child not in paths:
                paths[child] = paths[node] + [child]
                todo.append(child)
    return sorted(inside)


def layer_of(module: str) -> str:
    last = module.rsplit(".", 1)[-1]
    if last == "step":
        return "steps"
    if last == "cli" and module != "rlkeep.cli":
        return "edge"
    matches = [(len(prefix), layer) for layer, prefixes in LAYERS for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer of tests/test_structure.py LAYERS: give it one"
    return max(matches)[1]


def is_face(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").is_file()


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a module to one in a higher layer. A package's face (__init__) re-exports its
    modules, so its own imports are not judged; importing the face counts at the package's layer."""
    found = []
    for module in sorted(graph):
        if is_face(module):
            continue
        for target in sorted(graph[module]):
            here, there = LAYER_NAMES.index(layer_of(module)), LAYER_NAMES.index(layer_of(target))
            if there > here:
                found.append(f"{module} ({LAYER_NAMES[here]}) imports {target} ({LAYER_NAMES[there]})")
    return found


def test_the_graph_is_read_from_every_module() -> None:
    graph = import_graph()
    assert len(graph) > 150 and "rlkeep.pipeline" in graph and "rlkeep.records" in graph["rlkeep.context"]


def test_no_import_circle_in_the_product() -> None:
    graph = import_graph()
    found = circles(graph)
    for known in KNOWN_CIRCLES_OF_OTHER_HELPERS:
        assert any(known <= circle for circle in found) or not all(name in graph for name in known), (
            f"{sorted(known)} is no longer a circle: delete it from KNOWN_CIRCLES_OF_OTHER_HELPERS")
    left = [circle for circle in found if circle not in KNOWN_CIRCLES_OF_OTHER_HELPERS]
    assert left == [], "import circles:\n" + "\n".join(" -> ".join(one_cycle(graph, circle)) for circle in left)


def test_every_module_has_a_layer_and_no_import_climbs() -> None:
    graph = import_graph()
    assert {name: layer_of(name) for name in graph if name != "rlkeep"}  # layer_of names a module in none
    assert climbs(graph) == [], "imports that climb a layer:\n" + "\n".join(climbs(graph))


LAYOUT = PACKAGE.parents[1] / "docs" / "layout.md"
MODULE_LINE = re.compile(r"^- `([\w.]+)`", re.M)


def test_docs_layout_has_a_line_per_module_under_its_layer() -> None:
    """docs/layout.md lists each module once, under the heading of its layer here."""
    listed: dict[str, str] = {}
    layer = ""
    for line in LAYOUT.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            layer = line[4:].strip()
        elif found := MODULE_LINE.match(line):
            assert found.group(1) not in listed, f"docs/layout.md lists {found.group(1)} twice"
            listed[found.group(1)] = layer
    modules = {name.removeprefix("rlkeep."): layer_of(name) for name in import_graph() if name != "rlkeep"}
    assert listed == modules


def test_the_reader_counts_type_only_and_deferred_imports_and_finds_a_circle(tmp_path: Path) -> None:
    """Guards the checks themselves: a circle hidden under TYPE_CHECKING or in a function still counts."""
    package = tmp_path / "rlkeep"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from rlkeep.inner.a import A\n")
    (package / "inner" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from rlkeep.inner.b import B\nA = 1\n")
    (package / "inner" / "b.py").write_text("def f():\n    from .a import A\n    from rlkeep import errors\n")
    (package / "errors.py").write_text("")
    graph = import_graph(package)
    assert graph["rlkeep.inner.a"] == {"rlkeep.inner.b"}
    assert graph["rlkeep.inner.b"] == {"rlkeep.inner.a", "rlkeep.errors"}
    assert graph["rlkeep.inner"] == {"rlkeep.inner.a"}  # the face; reaching rlkeep.inner.a is not an import of it
    assert circles(graph) == [frozenset({"rlkeep.inner.a", "rlkeep.inner.b"})]
    assert one_cycle(graph, circles(graph)[0]) == ["rlkeep.inner.a", "rlkeep.inner.b", "rlkeep.inner.a"]


def test_the_layer_check_finds_a_climb() -> None:
    graph = {"rlkeep.records": {"rlkeep.errors", "rlkeep.sync.step"}, "rlkeep.errors": set(), "rlkeep.sync.step": set()}
    assert layer_of("rlkeep.sync.step") == "steps" and layer_of("rlkeep.hub.client") == "transport"
    assert layer_of("rlkeep.hub.model") == "domain" and layer_of("rlkeep.restore.cli") == "edge"
    assert climbs(graph) == ["rlkeep.records (model) imports rlkeep.sync.step (steps)"]
