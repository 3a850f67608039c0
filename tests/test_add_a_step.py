"""Adding a step takes its rule, its step module and its row in the step table, nothing else: a fake
step written into a copy of the workflow reaches DONE, STATUS.json, reclamation's wait list, the
archive's inputs and the campaign pages."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import REPO, seed_example
from tests.test_pipeline_table import ADAPTER, FUNCTION_HOME

ROW = '''    Step("check_notes", ALL_KINDS, "rlkeep.notes.step:check_notes_step", evidence="verify/notes.json",
         verify="notes", remaining="fix the notes named in the log, then rerun", after=("capture_chain",),
         archived=(("notes", "verify/notes.json"),)),
'''
RULE = '''

rule check_notes:
    # why its inputs: chain.json: the notes name the attempts.
    input:
        chain=get_chain_input,
    output:
        verify="{job}/verify/notes.json",
    log:
        "{job}/logs/check_notes.log",
    conda:
        RLKEEP_ENV
    script:
        "../scripts/steps/check_notes.py"
'''
# A new concern's package (an existing concern's step would go into its package's step module).
CONCERN = '''"""A fake concern: notes on a run's chain."""
'''
STEP_MODULE = '''"""A fake step: the attempts the chain names, as a verify sentinel."""
from rlkeep.jsonio import read_json, write_json


def check_notes_step(ctx):
    attempts = [attempt["id"] for attempt in read_json(ctx.inputs["chain"])["attempts"]]
    write_json(ctx.outputs["verify"], {"status": "completed", "attempts": attempts})
'''


def workflow_with_a_new_step(tmp_path: Path) -> Path:
    """A copy of the workflow with one more step: its row, its rule and its step module (the adapter
    is the same for every rule but its docstring)."""
    copy = tmp_path / "workflow"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("rules", "scripts", "config", "envs", "report"):
        shutil.copytree(REPO / name, copy / name, ignore=ignore)
    shutil.copy(REPO / "Snakefile", copy / "Snakefile")
    table = copy / "scripts/rlkeep/pipeline.py"
    text = table.read_text()
    assert FUNCTION_HOME.search(ROW)  # the new row follows the one convention, as every row does
    anchor = '    Step("done", ALL_KINDS'
    assert text.count(anchor) == 1
    table.write_text(text.replace(anchor, ROW + anchor))
    with (copy / "rules/archive.smk").open("a") as rules:
        rules.write(RULE)
    (copy / "scripts/rlkeep/notes").mkdir()
    (copy / "scripts/rlkeep/notes/__init__.py").write_text(CONCERN)
    (copy / "scripts/rlkeep/notes/step.py").write_text(STEP_MODULE)
    (copy / "scripts/steps/check_notes.py").write_text(ADAPTER.format(rule="check_notes", rules_file="archive.smk"))
    return copy


def test_a_new_row_and_its_rule_reach_done_status_reclaim_archive_and_pages(
        tmp_path: Path, data_root: Path, bucket: str, iris) -> None:
    workflow = workflow_with_a_new_step(tmp_path)
    seed_example(data_root, bucket, iris)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workflow / "scripts"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(workflow / "Snakefile"),
               "--profile", str(REPO / "profiles" / "local"), "rl-demo/DONE",
               "--config", "reclaim_authorized=rl-demo"]
    result = subprocess.run(command, cwd=data_root, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    job = data_root / "rl-demo"

    notes = json.loads((job / "verify/notes.json").read_text())
    assert notes["status"] == "completed" and notes["attempts"]
    done = json.loads((job / "DONE").read_text())
    assert done["steps"]["check_notes"] == "completed"
    assert done["verification"]["notes"] == "completed"
    status = json.loads((job / "STATUS.json").read_text())
    assert "check_notes" in json.dumps(status["steps"])
    # what each rule took, as Snakemake reports it (--detailed-summary: output, date, rule, log, inputs, ...)
    summary = subprocess.run(command[:-2] + ["--detailed-summary"], cwd=data_root, capture_output=True,
                             text=True, timeout=600, env=env)
    inputs = {line.split("\t")[0]: line.split("\t")[4].split(",") for line in summary.stdout.splitlines()
              if line.count("\t") >= 5}
    assert "rl-demo/verify/notes.json" in inputs["rl-demo/reclaim.json"]  # reclamation waits on it
    assert "rl-demo/verify/notes.json" in inputs["rl-demo/archive/MANIFEST"]  # the archive takes it
    assert json.loads((job / "reclaim.json").read_text())["status"] == "completed"
    # STATUS.json's step graph (a failed check_notes holds back the archive and reclamation) follows too
    graph = subprocess.run([sys.executable, "-c", "from rlkeep.pipeline import parents; "
                            "print(sorted(r for r in ('archive', 'rehearse_restore', 'reclaim') "
                            "if 'check_notes' in parents(r, 'rl')))"],
                           capture_output=True, text=True, env=env, check=True)
    assert graph.stdout.strip() == "['archive', 'reclaim', 'rehearse_restore']"
    with tarfile.open(job / "archive/rl-demo_archive.tgz") as archive:
        assert any(name.endswith("rlkeep/verify/notes.json") for name in archive.getnames())
    assert "check_notes" in (data_root / "campaign/rl-demo.html").read_text()
