"""Issue 18's bar for the whole code base, so it stays met: every module under scripts/ says its job
in a docstring and no function is over 80 lines (data tables are module-level assignments, not
functions, so they do not count). A module has no line cap: it may be long when it is one thing;
tests/test_structure.py holds how modules are cut (no import circle, no import climbing a layer)."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
MODULES = sorted(path for path in SCRIPTS.rglob("*.py") if "__pycache__" not in path.parts)
MAX_FUNCTION_LINES = 80


def _relative(path: Path) -> str:
    return str(path.relative_to(SCRIPTS))


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 50 and SCRIPTS / "rlkeep" / "pipeline.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_a_module_says_its_job_and_no_function_is_long(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    if path.name != "__main__.py" and source.strip():
        assert ast.get_docstring(tree), f"{path}: no module docstring"
    long = [f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], f"{path}: functions over {MAX_FUNCTION_LINES} lines: {long}"


# Where this machine keeps things: a results file or a page of documentation naming one of them holds
# only here (bench results name tools by version instead). Example logs and test inputs may name a
# logged container's own paths (/root/.netrc of the trainer's node), so the general pattern is for
# what rlkeep writes about itself; this checkout's own path is refused everywhere.
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|root|home/[^/\s\"']+|tmp/pytest-of-[^/\s\"']+)/")
ABOUT_ITSELF = ("bench/", "docs/", "config/", "profiles/", "envs/", ".ci/", "README.md", "Makefile", "pyproject.toml")


def _tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split("\0") if name]


def test_no_tracked_file_names_a_path_of_this_machine() -> None:
    found = []
    for path in _tracked_files():
        if path.suffix in {".png", ".parquet", ".tar", ".gz", ".safetensors"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            about_itself = str(path.relative_to(REPO)).startswith(ABOUT_ITSELF)
            if str(REPO) in line or (about_itself and MACHINE_PATH.search(line)):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert found == [], "machine paths in tracked files:\n" + "\n".join(found)


def test_the_machine_path_pattern_finds_what_it_is_for() -> None:
    assert MACHINE_PATH.search('"harbor_python": "/work/bench-env/harbor312/bin/python"')
    assert MACHINE_PATH.search("see /root/.cache/x") and MACHINE_PATH.search("/home/alice/runs")
    assert not MACHINE_PATH.search('File "/app/.venv/lib/python3.11/site-packages/torch/x.py"')


# A URL joined by hand with a store root or an archive base (one place joins them: rlkeep.urls.join_url,
# through JobRecord.url_of and Store.url_of).
HAND_JOINED_URL = re.compile(r"\{(?:record\.store|store\.url|self\.url|self\.base|location\.base|base)\}/")


def test_store_and_archive_urls_are_joined_in_one_place() -> None:
    found = [f"{path.relative_to(REPO)}:{number}" for path in sorted((SCRIPTS / "rlkeep").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if HAND_JOINED_URL.search(line)]
    assert found == []
    assert HAND_JOINED_URL.search('f"{record.store}/{key}"') and not HAND_JOINED_URL.search('record.url_of(key)')


RULES = sorted((REPO / "rules").glob("*.smk"))
MAX_COMMON_SMK_LINES = 250
MUTABLE_AT_TOP = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=\s*(?:\[|\{|set\(|dict\(|list\(|defaultdict\(|deque\()",
                            re.M)


def mutated_module_globals(source: str) -> list[str]:
    """Names a rules file binds at its top level to a list, dict or set and then changes anywhere."""
    found = []
    for name in MUTABLE_AT_TOP.findall(source):
        change = rf"\b{name}\s*(?:\.(?:append|extend|insert|add|update|setdefault|pop|popitem|remove|discard|clear)\(|\[[^\]]*\]\s*=|\s*[|+-]=)"
        if re.search(change, source):
            found.append(name)
    return found


def test_common_smk_keeps_config_records_and_inputs_and_rules_hold_no_mutable_state() -> None:
    assert len((REPO / "rules" / "common.smk").read_text().splitlines()) <= MAX_COMMON_SMK_LINES
    assert RULES and {path.name: mutated_module_globals(path.read_text()) for path in RULES} == {
        path.name: [] for path in RULES}
    # the check finds what it is for
    assert mutated_module_globals("NOTES = []\n\ndef f():\n    NOTES.append(1)\n") == ["NOTES"]
    assert mutated_module_globals("SEEN: dict = {}\nSEEN[1] = 2\n") == ["SEEN"]
    assert mutated_module_globals("ENV = '../envs/x.yaml'\nKEYS = ('a',)\n") == []
