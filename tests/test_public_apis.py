"""rlkeep uses snakemake, huggingface_hub and botocore through their public APIs: walked over the
product's syntax (scripts/rlkeep, rules/*.smk, the Snakefile), no assignment to an attribute of one
of their modules or classes, no change to sys.meta_path, no import of a private module (`._name`) of
theirs, outside rlkeep.snakemake_process.install() and the patches it switches on (which
tests/test_snakemake_process.py runs the pipeline without). rlkeep sets nothing in huggingface_hub's
environment: Xet stays its default, whatever the import order.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO

PACKAGES = ("snakemake", "huggingface_hub", "botocore")
PATCH_MODULE = REPO / "scripts" / "rlkeep" / "snakemake_process.py"


def snakefile_as_python(path: Path) -> str:
    """A Snakefile or .smk as the Python Snakemake compiles it to (its own parser, test-only)."""
    from snakemake.parser import parse

    source = SimpleNamespace(get_path_or_uri=lambda secret_free=True: str(path))
    workflow = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda src: open(path, encoding="utf-8")))
    code, _ = parse(source, workflow, {})
    return code


def product_sources() -> Iterator[tuple[Path, str]]:
    for path in sorted((REPO / "scripts" / "rlkeep").rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        yield path, snakefile_as_python(path)


def _of_packages(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in PACKAGES


def _private_module(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def _allowed_functions(tree: ast.Module) -> set[str]:
    """install() and the patch functions `_PATCH_INSTALLERS` names (rlkeep.snakemake_process only)."""
    allowed = {"install"}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_PATCH_INSTALLERS" for t in targets):
                allowed |= {value.id for value in node.value.values if isinstance(value, ast.Name)}
    return allowed


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(source: str, where: str, allowed_functions: set[str] = frozenset()) -> list[str]:
    """Each use of a dependency past its public API in `source`, as 'where:line: what'."""
    tree = ast.parse(source)
    bound: set[str] = set()  # names bound to a module, class or object of PACKAGES
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _of_packages(alias.name):
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _of_packages(node.module):
            bound |= {alias.asname or alias.name for alias in node.names}

    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name if function is None else function
        exempt = function in allowed_functions
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found.extend(f"{line}: imports private module {a.name}" for a in node.names
                         if _of_packages(a.name) and _private_module(a.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _of_packages(node.module):
            if _private_module(node.module):
                found.append(f"{line}: imports from private module {node.module}")
            found.extend(f"{line}: imports private name {node.module}.{a.name}" for a in node.names
                         if a.name.startswith("_"))
        elif isinstance(node, ast.Attribute) and node.attr == "meta_path" and not exempt:
            found.append(f"{line}: touches sys.meta_path")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) and not exempt:
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            while any(isinstance(t, ast.Tuple | ast.List | ast.Starred) for t in targets):
                targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else
                                                         [t.value] if isinstance(t, ast.Starred) else [t])]
            found.extend(f"{line}: assigns {ast.unparse(t)}" for t in targets
                         if isinstance(t, ast.Attribute) and _root_name(t) in bound)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and node.args and _root_name(node.args[0]) in bound and not exempt):
            found.append(f"{line}: {node.func.id} on {ast.unparse(node.args[0])}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def test_the_product_uses_its_dependencies_through_their_public_apis_outside_install() -> None:
    found = []
    for path, source in product_sources():
        allowed = _allowed_functions(ast.parse(source)) if path == PATCH_MODULE else set()
        found += violations(source, str(path.relative_to(REPO)), allowed)
    assert found == []


@pytest.mark.parametrize("source, what", [
    ("from huggingface_hub.utils._http import default_client_factory", "private module"),
    ("import botocore._endpoint", "private module"),
    ("from snakemake import _private", "private name"),
    ("from huggingface_hub import constants as c\nc.HF_HUB_DISABLE_XET = True", "assigns c.HF_HUB_DISABLE_XET"),
    ("from snakemake.persistence import PersistenceBase\nPersistenceBase._x = 1", "assigns PersistenceBase._x"),
    ("import botocore.auth\nbotocore.auth.X = 1", "assigns botocore.auth.X"),
    ("from snakemake.iocontainers import Snakemake\nsetattr(Snakemake, 'f', 1)", "setattr on Snakemake"),
    ("import sys\nsys.meta_path.insert(0, object())", "sys.meta_path"),
])
def test_the_walk_finds_each_kind_of_reach_past_a_public_api(source: str, what: str) -> None:
    found = violations(source, "x.py")
    assert len(found) == 1 and what in found[0], found


def test_the_walk_leaves_public_uses_and_install_alone() -> None:
    public = ("from huggingface_hub import get_session, set_client_factory\nset_client_factory(lambda: None)\n"
              "import botocore.config\nconfig = botocore.config.Config(retries={'max_attempts': 1})\n"
              "x = object()\nx.y = 1\n")
    assert violations(public, "x.py") == []
    inside = "def install():\n    from snakemake.persistence import P\n    P.f = 1\n"
    assert violations(inside, "x.py", {"install"}) == []
    assert violations(inside, "x.py") != []


HUB_SCRIPT = """
import json, os, sys
before = {key: value for key, value in os.environ.items() if key.startswith(("HF_", "HUGGINGFACE"))}
if sys.argv[1] == "huggingface_hub first":
    from huggingface_hub import HfApi  # loads its constants, which read the environment once
import rlkeep.hub, rlkeep.hub.step, rlkeep.traces.step
from huggingface_hub import constants, get_session
hooks_before = get_session().event_hooks["request"]
rlkeep.hub.resolve_target("http://127.0.0.1:9").api()
session = get_session()
after = {key: value for key, value in os.environ.items() if key.startswith(("HF_", "HUGGINGFACE"))}
print(json.dumps({"environment_kept": after == before, "xet_disabled": constants.HF_HUB_DISABLE_XET,
                  "hooks_kept": session.event_hooks["request"] == hooks_before and len(hooks_before) > 0,
                  "rate_limited": type(session._transport).__name__}))
"""


def hub_state(order: str, **env: str) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "HF_HUB_DISABLE_XET"}
    result = subprocess.run([sys.executable, "-c", HUB_SCRIPT, order], capture_output=True, text=True,
                            env={**environment, **env}, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("order", ["rlkeep.hub first", "huggingface_hub first"])
def test_rlkeep_sets_nothing_in_huggingface_hubs_environment_and_xet_stays_its_default(order: str) -> None:
    """Issue 50: Xet is huggingface_hub's default wherever the Hub offers it, whatever the import order;
    rlkeep.hub.transfer falls back to LFS per Hub answer, never by switching Xet off for the process."""
    assert hub_state(order) == {"environment_kept": True, "xet_disabled": False, "hooks_kept": True,
                                "rate_limited": "RateLimitTransport"}
    # a user's own switch is theirs: kept as they set it
    assert hub_state(order, HF_HUB_DISABLE_XET="1")["xet_disabled"] is True
