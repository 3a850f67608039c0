"""One bad record does not stop the campaign (issue 28): the campaign target plans and builds every
good record, names every refused one (file, field, what was expected) without a traceback, and
campaign/refused.json tells a script which records were refused. Naming a refused record's DONE
fails with its message alone. Real Snakemake subprocesses over generated datagen runs in file
stores (the kind with the fewest steps that still syncs a trace tree; no scheduler to stand in for).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from rlkeep.campaign import write_views
from rlkeep_dev.example.kinds import write_datagen_run
from tests.conftest import run_snakemake, write_record

GOOD = [f"dg-{index}" for index in range(1, 6)]
TYPO = "dg-typo"        # a generated run whose record misspells `store`
UNBASED = "rl-unbased"  # names publish.model without base_model (never started: nothing to seed)


def seed_datagen(tmp_path: Path, data_root: Path, job: str) -> dict:
    run = write_datagen_run(tmp_path / "runs" / job, job=job, n_trials=12)
    record = run.record(store_url=f"file://{run.root}")
    write_record(data_root, record)
    return record


def planned_done(output: str) -> set[str]:
    return set(re.findall(r"output: ([A-Za-z0-9._-]+)/DONE", output))


def assert_no_traceback(output: str) -> None:
    for crash in ("Traceback", "InputFunctionException", 'File "', "WorkflowError"):
        assert crash not in output, (crash, output[-3000:])


def test_bad_records_are_named_and_every_good_one_is_built(tmp_path: Path, data_root: Path) -> None:
    for job in GOOD:
        seed_datagen(tmp_path, data_root, job)
    typo = seed_datagen(tmp_path, data_root, TYPO)
    typo_file = data_root / "records" / f"{TYPO}.yaml"
    typo_file.write_text(typo_file.read_text().replace("store:", "stroe:"))
    write_record(data_root, {"job": UNBASED, "user": "demo", "scheduler": "none", "chain": [f"/demo/{UNBASED}"],
                             "store": f"s3://runs/{UNBASED}", "checkpoint": {"interval": 20},
                             "publish": {"model": f"demo/{UNBASED}", "traces": f"demo/{UNBASED}-traces"}})
    typo_error = (f"records/{TYPO}.yaml: unknown key 'stroe' in the top level (did you mean 'store'?); expected only: archive, base_model, "
                  "chain, chain_excludes, checkpoint, cluster, job, kind, layout, publish, register, scheduler, "
                  "store, store_region, tracker_url, user")
    unbased_error = (f"records/{UNBASED}.yaml: field 'base_model' is missing; expected a Hub model id like "
                     "Qwen/Qwen3-8B because publish.model names a model to publish (rlkeep never guesses a base model)")
    refusal = (f"rlkeep: 2 records refused; their jobs are not planned, every other record's are. Correct each "
               "file as its line says and run the same command again (campaign/refused.json lists the refused "
               f"records after each run):\n  {typo_error}\n  {unbased_error}\n")

    plan = run_snakemake(data_root, extra=("-n",))
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert planned_done(plan.stdout) == set(GOOD)
    assert refusal in plan.stderr
    assert_no_traceback(plan.stdout + plan.stderr)

    result = run_snakemake(data_root)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stderr.count(refusal) == 2  # when planning, and again at the end of the run
    for job in GOOD:
        done = json.loads((data_root / job / "DONE").read_text())
        assert done["job"] == job and [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")], job
    assert not (data_root / TYPO).exists() and not (data_root / UNBASED).exists()
    refused = json.loads((data_root / "campaign" / "refused.json").read_text())
    assert refused["records"] == 7
    assert [(entry["job"], entry["file"]) for entry in refused["refused"]] == [
        (TYPO, f"records/{TYPO}.yaml"), (UNBASED, f"records/{UNBASED}.yaml")]
    assert [entry["error"] for entry in refused["refused"]] == [typo_error, unbased_error]

    # a refused record's DONE, named: its message alone, before any work
    named = run_snakemake(data_root, f"{TYPO}/DONE")
    assert named.returncode == 1
    assert f"rlkeep: {typo_error}\n" in named.stderr
    assert_no_traceback(named.stdout + named.stderr)
    assert not (data_root / TYPO).exists()

    # the message's advice, followed: correct the file, run the same command; the corrected job is built
    typo_file.write_text(yaml.safe_dump(typo, sort_keys=False))
    again = run_snakemake(data_root)
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"rlkeep: 1 record refused;" in again.stderr and typo_error not in again.stderr
    done = json.loads((data_root / TYPO / "DONE").read_text())
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]
    refused = json.loads((data_root / "campaign" / "refused.json").read_text())
    assert [entry["job"] for entry in refused["refused"]] == [UNBASED]


def test_refused_json_lists_every_record_that_does_not_load_also_from_the_pages_cache(tmp_path: Path,
                                                                                        data_root: Path) -> None:
    seed_datagen(tmp_path, data_root, "dg-1")
    (data_root / "records" / "dg-2.yaml").write_text("job: dg-2\nchain: [unclosed\n")
    (data_root / "dg-2" / "logs").mkdir(parents=True)  # started before its record broke: its views are memoized
    refused_file = data_root / "campaign" / "refused.json"
    expected = {"records": 2, "refused": [{"job": "dg-2", "file": "records/dg-2.yaml",
                                           "error": "records/dg-2.yaml: not valid YAML at line 3, column 1: "
                                                    "did not find expected ',' or ']'"}]}
    for _ in range(2):  # the second refresh reads nothing again (dg-2/.work/views.json) and says the same
        write_views(data_root, Path("records"))
        assert json.loads(refused_file.read_text()) == expected
    (data_root / "records" / "dg-2.yaml").unlink()
    write_views(data_root, Path("records"))
    assert json.loads(refused_file.read_text()) == {"records": 1, "refused": []}
