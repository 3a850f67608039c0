"""rlkeep.pipeline, the one step table: every rule has its row and its own adapter, the same for every rule, and
says why it takes its inputs; every row's function lives where the one convention says; the Snakefile's
target map is the rules' outputs; one authorization answer for the Snakefile and the steps;
and a data root made by the revision before the table (rules named their function in `params: run=`)
plans "Nothing to be done" after the one-time migration README describes (`--touch`).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
import yaml

from rlkeep.context import StepContext, is_authorized
from rlkeep.errors import RlkeepError
from rlkeep.kinds import KINDS
from rlkeep.pipeline import PIPELINE, STEPS, step_for_rule
from rlkeep.records import load_record
from rlkeep.step_cli import function_reference, load_function, rule_for_target
from tests.conftest import REPO, run_snakemake, seed_example
from tests.test_public_apis import snakefile_as_python

ADAPTERS = REPO / "scripts" / "steps"

# The last revision whose rules named their function in `params: run=` (the data roots made by it
# carry that string in every output's recorded params).
BEFORE_TABLE = "3f7c52a"
JOB = "rl-demo"


# Every adapter, scripts/steps/<rule>.py, is exactly this: what a rule makes is said once, in the rule.
ADAPTER = '''"""Rule {rule} (rules/{rules_file}): runs its row's function in the step table."""
from rlkeep.runner import RuleProcess

RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
'''
# Where a step's function lives (rlkeep.pipeline's docstring, docs/layout.md): the `step` module of the
# package of its concern, named after its rule.
FUNCTION_HOME = re.compile(r"rlkeep\.(?P<concern>\w+)\.step:(?P<function>\w+)")


def rule_names() -> set[str]:
    result = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--list-rules"],
                            capture_output=True, text=True, cwd=REPO, check=True)
    return {line.strip() for line in result.stdout.splitlines() if line.strip()}


def rule_scripts() -> dict[str, str]:
    """{rule: its `script:` path} of every rule in rules/*.smk."""
    scripts = {}
    for smk in (REPO / "rules").glob("*.smk"):
        for match in re.finditer(r"^rule (\w+):\n(?:(?!^rule ).*\n)*?    script:\n\s+\"([^\"]+)\"", smk.read_text(), re.M):
            scripts[match.group(1)] = match.group(2)
    return scripts


def test_each_rule_says_why_it_takes_its_inputs_and_the_snakefile_names_each_rule_file() -> None:
    """A rule's reasons sit at its top; the Snakefile's map names every rules file, and only those."""
    for smk in (REPO / "rules").glob("*.smk"):
        for block in re.split(r"(?m)^(?=rule \w+:)", smk.read_text())[1:]:
            assert re.match(r"rule \w+:\n    # why its inputs: ", block), (smk.name, block[:80])
    header = (REPO / "Snakefile").read_text().split("from snakemake", 1)[0]
    named = set(re.findall(r"rules/\w+\.smk", header))
    assert named == {f"rules/{path.name}" for path in (REPO / "rules").glob("*.smk")}


def test_every_rule_has_one_row_and_runs_its_own_adapter() -> None:
    names = [step.name for step in PIPELINE]
    assert len(names) == len(set(names))
    assert rule_names() - {"all"} == set(names)  # all runs nothing
    for smk in (REPO / "rules").glob("*.smk"):
        assert "run=" not in smk.read_text(), smk  # the adapter, not a params string, picks the function
    scripts = rule_scripts()
    assert scripts == {rule: f"../scripts/steps/{rule}.py" for rule in rule_names() - {"all"}}
    assert {path.stem for path in ADAPTERS.glob("*.py")} == set(scripts)  # no adapter without its rule
    for step in PIPELINE:
        assert step_for_rule(step.name) is step
        assert rule_for_target(step.name) == step.name
        assert step.kinds <= set(KINDS), step
    assert [step.name for step in STEPS] == [step.name for step in PIPELINE if step.evidence]
    with pytest.raises(RlkeepError, match="no row in rlkeep.pipeline.PIPELINE"):
        step_for_rule("publish_modle")


def rules_files() -> dict[str, str]:
    """{rule: the rules file (rules/<name>.smk) that holds it}."""
    return {rule: smk.name for smk in (REPO / "rules").glob("*.smk")
            for rule in re.findall(r"^rule (\w+):", smk.read_text(), re.M)}


def test_every_adapter_is_the_one_template() -> None:
    """An adapter names its rule and rules file, nothing else: no list of outputs to fall out of date."""
    homes = rules_files()
    for path in ADAPTERS.glob("*.py"):
        assert path.read_text() == ADAPTER.format(rule=path.stem, rules_file=homes[path.stem]), path


def test_every_row_follows_the_one_convention_for_where_its_function_lives() -> None:
    """`rlkeep.<concern>.step:<rule>_step`, <concern> a package under scripts/rlkeep/: from a rule's
    name a reader knows the function's name, and the row says which package owns it."""
    for step in PIPELINE:
        found = FUNCTION_HOME.fullmatch(step.function)
        assert found, f"{step.name}: {step.function!r} is not rlkeep.<concern>.step:<rule>_step"
        assert found["function"] == f"{step.name}_step", (step.name, step.function)
        assert (REPO / "scripts" / "rlkeep" / found["concern"] / "__init__.py").is_file(), step.function
    assert not FUNCTION_HOME.fullmatch("rlkeep.sync:sync_logs_step")  # a top-level module is no concern package
    assert not FUNCTION_HOME.fullmatch("rlkeep.hub.steps:stage_model_step")


def rule_outputs() -> set[tuple[str, str, str]]:
    """(output with <job> for {job}, its rules file, its rule) of every rule, read from the Python
    Snakemake compiles each rules file to; a directory() output ends in '/'."""
    def path_of(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.replace("{job}", "<job>")
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), ast.unparse(node)
        return path_of(node.args[0]) + ("/" if node.func.id == "directory" else "")  # report(), temp(), ...

    found = set()
    for smk in (REPO / "rules").glob("*.smk"):
        for function in ast.walk(ast.parse(snakefile_as_python(smk))):
            calls = {ast.unparse(d.func): d for d in getattr(function, "decorator_list", []) if isinstance(d, ast.Call)}
            if "workflow.rule" in calls and "workflow.output" in calls:
                rule = next(k.value.value for k in calls["workflow.rule"].keywords if k.arg == "name")
                outputs = calls["workflow.output"]
                for node in [*outputs.args, *(k.value for k in outputs.keywords)]:
                    found.add((path_of(node), f"rules/{smk.name}", rule))
    return found


def test_the_snakefiles_target_map_is_every_rules_outputs() -> None:
    """The header's list (target, rules file, rule) is kept by hand for a newcomer: every output of
    every rule appears with its rules file and rule, and nothing no rule makes is listed."""
    header = (REPO / "Snakefile").read_text().split("from snakemake", 1)[0]
    listed = set()
    for line in header.splitlines():
        if line.startswith("#   <job>/"):
            fields = line[1:].split()
            assert len(fields) == 3 and fields[1].startswith("rules/"), line
            listed.add(tuple(fields))
    made = rule_outputs()
    assert {"<job>/model/", "<job>/metrics/metrics.csv"} <= {path for path, _, _ in made}  # the reader reads
    assert sorted(made - listed) == [], "outputs missing from the Snakefile's header"
    assert sorted(listed - made) == [], "the Snakefile's header lists what no rule makes (or the wrong rule)"


def test_every_row_names_its_step_function_in_the_module_that_defines_it() -> None:
    """The `function` column is the function's own module and name (go to definition lands on it): a
    renamed or moved function fails here, not in a run. Every adapter runs the row's function, and
    `rlkeep step` reads the same column."""
    for step in PIPELINE:
        reference = function_reference(step.name)
        function = load_function(reference)
        assert callable(function) and f"{function.__module__}:{function.__name__}" == reference, (step, function)
        assert rule_for_target(reference) == step.name
    # the name a package re-exports finds the rule too (`rlkeep step rlkeep.archive:archive_step`)
    assert rule_for_target("rlkeep.archive:archive_step") == "archive"
    with pytest.raises(RlkeepError, match="no rule's row"):
        rule_for_target("rlkeep.archive:no_such_step")


# Libraries a planning process or a step that does not use them must not import (together about
# half a second per process, paid ~20 times per run before the table held references).
HEAVY = ("pyarrow", "pandas", "matplotlib", "huggingface_hub", "boto3", "botocore", "numpy", "torch")


def snakefile_imports() -> list[str]:
    """The rlkeep modules the Snakefile and its rules import (top level or inside input functions)."""
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    found = {match for path in sources
             for match in re.findall(r"^\s*(?:from|import) (rlkeep[\w.]*)", path.read_text(), re.M)}
    return sorted(found)


def heavy_modules_after(code: str) -> list[str]:
    """The HEAVY libraries a fresh interpreter has imported after running `code`."""
    probe = code + f"\nimport sys\nprint(sorted(name for name in {HEAVY!r} if name in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "scripts")})
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def test_planning_imports_no_heavy_library() -> None:
    modules = snakefile_imports()
    assert {"rlkeep.records", "rlkeep.pipeline", "rlkeep.invocation"} <= set(modules), modules
    # rlkeep.report: the views the planning process writes when it ends (rlkeep.invocation)
    planning = "\n".join(f"import {module}" for module in [*modules, "rlkeep.report"]) + (
        "\nfrom rlkeep.kinds import KINDS\nfrom rlkeep.pipeline import STEPS\n"
        "from rlkeep.pipeline import steps_for_kind, verify_sentinels\n"
        "for kind in KINDS:\n    steps_for_kind(kind), verify_sentinels(kind)\n"
        "[step.evidence for step in STEPS]")
    assert heavy_modules_after(planning) == []


@pytest.mark.parametrize("rule", ["capture_chain", "sync_logs", "list_checkpoints", "select_checkpoint",
                                  "export_model", "verify_archive", "reclaim", "done"])
def test_a_step_process_imports_only_what_its_step_uses(rule: str) -> None:
    """An adapter's path: rlkeep.runner, then its function's own module; none of these steps uses a
    HEAVY library at import (export imports torch only to read a sharded checkpoint)."""
    module, _, name = function_reference(rule).partition(":")
    loaded = heavy_modules_after(f"import rlkeep.runner\nfrom {module} import {name}")
    assert loaded == []


def context(tmp_path: Path, config: dict) -> StepContext:
    record = tmp_path / "records" / f"{JOB}.yaml"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(yaml.safe_dump({"job": JOB, "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo"],
                                      "store": "file:///data/rl-demo", "checkpoint": {"interval": 20}}))
    return StepContext(job=JOB, record=load_record(record), data_root=tmp_path, inputs={}, outputs={}, config=config)


@pytest.mark.parametrize(("value", "granted"), [
    (JOB, True), ("rl-demo-b", False), ([JOB, "other"], True), (["other"], False), ((JOB,), True), (None, False),
    ("", False), (f"{JOB},other", False),
])
def test_one_authorization_answer(tmp_path: Path, value: object, granted: bool) -> None:
    config = {} if value is None else {"reclaim_authorized": value}
    assert is_authorized(config, "reclaim_authorized", JOB) is granted
    assert context(tmp_path, config).authorized("reclaim_authorized") is granted


def old_revision(tmp_path: Path) -> Path:
    """The revision before the table, extracted from this repository's history (git archive)."""
    present = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{BEFORE_TABLE}^{{commit}}"],
                             capture_output=True)
    if present.returncode != 0:
        pytest.skip(f"commit {BEFORE_TABLE} is not in this clone's history (a shallow clone): the previous "
                    "revision cannot be built")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE_TABLE, "Snakefile", "rules", "scripts", "config",
                              "profiles", "report"], capture_output=True, check=True).stdout
    root = tmp_path / "before-table"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def planned_rules(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
            if line.strip().startswith(("rule ", "localrule "))]


def test_a_data_root_of_the_previous_revision_plans_nothing_after_the_documented_touch(
        tmp_path: Path, data_root: Path, bucket: str, iris) -> None:
    old = old_revision(tmp_path)
    seed_example(data_root, bucket, iris, n_trials=12)
    made = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(old / "Snakefile"),
                           "--profile", str(old / "profiles" / "local"), f"{JOB}/DONE"],
                          cwd=data_root, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(old / "scripts")})
    assert made.returncode == 0, (made.stdout + made.stderr)[-6000:]
    assert "run=" in (old / "rules" / "capture.smk").read_text()  # it is the revision the migration is for
    done_before = (data_root / JOB / "DONE").read_bytes()
    calls_before = iris.calls()

    # Without the migration every finished step would run again: its recorded params held `run=`.
    planned = run_snakemake(data_root, f"{JOB}/DONE", extra=("-n",))
    assert planned.returncode == 0, planned.stderr
    assert {"capture_chain", "sync_logs", "export_model", "archive", "reclaim", "done"} <= set(planned_rules(planned))
    assert "params" in planned.stdout + planned.stderr

    # The documented one-time step (README, migration notes): record the new params, run nothing.
    touched = run_snakemake(data_root, f"{JOB}/DONE", extra=("--touch",))
    assert touched.returncode == 0, touched.stderr
    assert iris.calls() == calls_before  # no step ran: nothing was stopped, listed or uploaded again
    assert (data_root / JOB / "DONE").read_bytes() == done_before

    after = run_snakemake(data_root, f"{JOB}/DONE", extra=("-n",))
    assert after.returncode == 0, after.stderr
    assert "Nothing to be done" in after.stdout + after.stderr, planned_rules(after)

    # The Snakefile asks the same authorization function: a list naming the job grants it (the
    # reclaim's params change, so it would run), a list naming others does not.
    granted = run_snakemake(data_root, f"{JOB}/DONE", extra=("-n",), config=(f"reclaim_authorized=[other, {JOB}]",))
    assert "reclaim" in planned_rules(granted) and "capture_chain" not in planned_rules(granted)
    refused = run_snakemake(data_root, f"{JOB}/DONE", extra=("-n",), config=("reclaim_authorized=[other]",))
    assert "Nothing to be done" in refused.stdout + refused.stderr, planned_rules(refused)


@pytest.mark.parametrize("target", ["capture_chain", "rlkeep.scheduler.step:capture_chain_step"])
def test_rlkeep_step_runs_the_function_the_rules_adapter_imports(tmp_path: Path, target: str) -> None:
    """`rlkeep step` as README gives it, on a record whose scheduler is `none` (nothing to reach)."""
    records = tmp_path / "records"
    records.mkdir()
    (records / "k.yaml").write_text(yaml.safe_dump({
        "job": "k", "user": "demo", "scheduler": "none", "chain": ["/demo/k"], "store": "file:///data/k",
        "checkpoint": {"interval": 5}}))
    result = subprocess.run([sys.executable, "-m", "rlkeep", "step", target, "--job", "k", "--output",
                             "chain=k/chain.json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "step capture_chain (rlkeep.scheduler.step:capture_chain_step)" in result.stderr
    chain = yaml.safe_load((tmp_path / "k" / "chain.json").read_text())
    assert [attempt["id"] for attempt in chain["attempts"]] == ["/demo/k"]
    wrong = subprocess.run([sys.executable, "-m", "rlkeep", "step", "capture_chian", "--job", "k"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert wrong.returncode != 0 and "capture_chian" in wrong.stderr and "capture_chain" in wrong.stderr
