"""No command built from record values ever goes through a shell: a static scan of the rules and of the
package. Rules run Python through `script:` (never a `shell:` or `run:` that formats record values),
and every process the package starts is an argument list without `shell=True`.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.reliability import figures_log
from tests.reliability.support import REPO

PACKAGE = REPO / "scripts" / "rlkeep"
DEV_PACKAGE = REPO / "scripts" / "rlkeep_dev"  # the dev servers and the demo start processes too
RULE_FILES = sorted((REPO / "rules").glob("*.smk")) + [REPO / "Snakefile"]
PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
ALWAYS_SHELL = {("subprocess", "getoutput"), ("subprocess", "getstatusoutput"), ("os", "system"), ("os", "popen")}


def dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def string_built(node: ast.AST) -> bool:
    """A command given as one string (what a shell would parse), rather than a list of arguments."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return string_built(node.left) or string_built(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {"format", "join"}:
        return True
    return False


def list_bound(function: ast.AST, name: str) -> bool:
    """`name` is assigned a list or tuple display (possibly with starred parts) in this function."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return True
    return False


def process_calls(tree: ast.AST) -> list[tuple[ast.Call, ast.AST]]:
    """(call, enclosing function) for every subprocess / os process call in a module."""
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]
    seen: set[int] = set()
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and id(node) not in seen:
                name = dotted(node.func)
                if (len(name) >= 2 and name[-2] == "subprocess" and name[-1] in PROCESS_CALLS) or \
                        name[-2:] in ALWAYS_SHELL or (len(name) >= 2 and name[-2] == "os" and name[-1].startswith(("spawn", "exec"))):
                    seen.add(id(node))
                    found.append((node, function))
    return found


def scan_source(source: str, where: str) -> tuple[int, list[str]]:
    """(process calls checked, problems) for one module's source."""
    tree = ast.parse(source, filename=where)
    problems, checked = [], 0
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "shell" and not (
                isinstance(node.value, ast.Constant) and node.value.value is False):
            problems.append(f"{where}:{node.value.lineno}: shell={ast.unparse(node.value)}")
    for call, function in process_calls(tree):
        checked += 1
        name = ".".join(dotted(call.func))
        if dotted(call.func)[-2:] in ALWAYS_SHELL:
            problems.append(f"{where}:{call.lineno}: {name} always runs a shell")
            continue
        if not call.args:
            continue
        command = call.args[0]
        if string_built(command):
            problems.append(f"{where}:{call.lineno}: {name} gets a command string: {ast.unparse(command)[:80]}")
        elif isinstance(command, ast.Name) and not list_bound(function, command.id):
            problems.append(f"{where}:{call.lineno}: {name}({command.id}): not visibly an argument list")
    return checked, problems


def test_no_process_is_started_through_a_shell_or_from_a_string() -> None:
    problems, checked = [], 0
    for path in sorted([*PACKAGE.rglob("*.py"), *DEV_PACKAGE.rglob("*.py")]):
        count, found = scan_source(path.read_text(), str(path.relative_to(REPO)))
        checked += count
        problems += found
    figures_log.record("static_scan", process_calls=checked, problems=len(problems))
    assert checked >= 3  # the iris CLI, git for the source revision, the dev servers
    assert problems == []


def test_the_scan_catches_each_shell_form() -> None:
    bad = (
        "import os, subprocess\n"
        "def stop(record):\n"
        "    subprocess.run(f\"iris job stop {record.chain[0]}\", shell=True)\n"
        "    subprocess.check_output('iris job logs ' + record.job)\n"
        "    command = 'iris ' + record.job\n"
        "    subprocess.Popen(command)\n"
        "    os.system('iris job summary ' + record.job)\n"
        "    subprocess.getoutput('ls')\n"
    )
    checked, problems = scan_source(bad, "bad.py")
    assert checked == 5
    assert len(problems) == 6, problems  # shell=True, its f-string, the concatenation, the name, os.system, getoutput


def module_files(name: str) -> list[Path]:
    """rlkeep/<name>.py, or every module of the package rlkeep/<name>/ once it is split."""
    module = PACKAGE / f"{name}.py"
    return [module] if module.is_file() else sorted((PACKAGE / name).glob("*.py"))


def test_the_scheduler_and_the_store_use_argument_lists() -> None:
    calls = [call for path in module_files("scheduler") for call in process_calls(ast.parse(path.read_text()))]
    assert calls, "rlkeep.scheduler starts no process? (the iris CLI is called through subprocess)"
    for call, function in calls:
        command = call.args[0]
        assert isinstance(command, (ast.List, ast.Tuple)) or (
            isinstance(command, ast.Name) and list_bound(function, command.id)), ast.unparse(call)
        assert not any(k.arg == "shell" for k in call.keywords), ast.unparse(call)
    # The iris command line is a list: the binary, the cluster option, then each argument as it is.
    iris_cli = ast.parse((PACKAGE / "scheduler" / "iris_cli.py").read_text())
    run = next(f for f in ast.walk(iris_cli) if isinstance(f, ast.FunctionDef) and f.name == "_run")
    assigned = next(n for n in ast.walk(run) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "command")
    assert isinstance(assigned.value, ast.List) and any(isinstance(e, ast.Starred) for e in assigned.value.elts)
    # The store never shells out (boto3 and urllib3 only).
    modules = [path for name in ("storage", "sync", "reclaim", "archive", "hub", "export")
               for path in module_files(name)]  # a package counts module by module
    assert len(modules) > 6
    for path in modules:
        assert process_calls(ast.parse(path.read_text())) == [], path.relative_to(PACKAGE)


SHELL_DIRECTIVE = re.compile(r"^\s+(shell|run)\s*:", re.M)
INTERPOLATION = re.compile(r"\{(wildcards|params|config|input|output)[^}]*\}")


def test_rules_run_python_scripts_never_shell_commands_with_record_values() -> None:
    for path in RULE_FILES:
        text = path.read_text()
        for match in SHELL_DIRECTIVE.finditer(text):
            block = text[match.end(): match.end() + 400].split("\n\n")[0]
            assert not INTERPOLATION.search(block), f"{path.name}: a {match.group(1)}: block formats {block[:120]!r}"
            assert match.group(1) != "shell", f"{path.name}: a shell: directive"
        for rule in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)+)", text, re.M):
            name, body = rule
            if name == "all":
                continue
            assert "script:" in body, f"{path.name}: rule {name} does not run a script"
