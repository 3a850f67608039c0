"""rlkeep.settled: when the campaign target may leave a completed job out of planning, and how many
jobs that have not started it takes per invocation (max_new_jobs, checked here through real
`snakemake` runs too).

The pipeline-level check of settling (the default target plans only unsettled jobs, and each way
of unsettling one brings it back) is in tests/test_many_jobs.py."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkeep.settled import (
    admitted_jobs, named_in_config, planning_is_forced, refusal_message, unsettled_reason, waiting_message,
)
from tests.conftest import run_snakemake, write_record

RECORD = b"job: rl-demo\n"
SHA = hashlib.sha256(RECORD).hexdigest()


def completed_job(root: Path, *, sha: str | None = SHA) -> tuple[Path, list[Path]]:
    job_dir = root / "rl-demo"
    evidence = [job_dir / "chain.json", job_dir / "verify" / "archive.json"]
    for path in evidence:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"status": "completed"}')
        os.utime(path, (1_000, 1_000))
    (job_dir / "REPORT.md").write_text("# rl-demo\n")
    (job_dir / "DONE").write_text(json.dumps({"job": "rl-demo", "kind": "rl", "record_sha256": sha}))
    os.utime(job_dir / "DONE", (2_000, 2_000))
    return job_dir, evidence


def evidence_of(evidence: list[Path]):
    """The evidence of the kind DONE names (rl here), as rlkeep.pipeline.evidence_of gives it."""
    return lambda kind: evidence if kind == "rl" else []


def test_a_completed_job_whose_record_and_evidence_are_unchanged_is_settled(tmp_path: Path) -> None:
    job_dir, evidence = completed_job(tmp_path)
    assert unsettled_reason(job_dir, SHA, evidence_of(evidence)) is None


@pytest.mark.parametrize("change, reason", [
    ("no DONE", "no completion record"),
    ("DONE before rlkeep recorded the record", "the record differs"),
    ("record edited", "the record differs"),
    ("DONE not JSON", "unreadable"),
    ("evidence newer", "archive.json is newer than DONE"),
    ("evidence removed", "chain.json is missing"),
    ("no REPORT.md", "REPORT.md is missing"),
    ("DONE without a kind", "names no run kind"),
])
def test_each_change_since_done_unsettles_the_job_and_says_why(tmp_path: Path, change: str, reason: str) -> None:
    job_dir, evidence = completed_job(tmp_path, sha=None if "before rlkeep" in change else SHA)
    sha = SHA
    if change == "no DONE":
        (job_dir / "DONE").unlink()
    elif change == "record edited":
        sha = hashlib.sha256(RECORD + b"# reviewed\n").hexdigest()
    elif change == "DONE not JSON":
        (job_dir / "DONE").write_text("{half")
    elif change == "evidence newer":
        os.utime(evidence[1], (3_000, 3_000))
    elif change == "evidence removed":
        evidence[0].unlink()
    elif change == "no REPORT.md":
        (job_dir / "REPORT.md").unlink()
    elif change == "DONE without a kind":
        (job_dir / "DONE").write_text(json.dumps({"job": "rl-demo", "record_sha256": SHA}))
        os.utime(job_dir / "DONE", (2_000, 2_000))
    found = unsettled_reason(job_dir, sha, evidence_of(evidence))
    assert found is not None and reason in found, found


def test_a_job_named_by_any_config_value_is_named() -> None:
    assert named_in_config({"reclaim_authorized": "rl-demo"}, "rl-demo")
    assert named_in_config({"allow_transfer": ["other", "rl-demo"]}, "rl-demo")
    assert not named_in_config({"reclaim_authorized": "rl-demo-2", "records": "records"}, "rl-demo")
    assert not named_in_config({"policy": {"max_transfer_bytes": 1}}, "rl-demo")


def test_any_forcing_setting_means_full_planning() -> None:
    quiet = dict(forceall=False, forcetargets=False, forcerun=frozenset(), until=frozenset(), omit_from=frozenset())
    assert not planning_is_forced(SimpleNamespace(**quiet))
    for key, value in [("forceall", True), ("forcetargets", True), ("forcerun", frozenset({"register"})),
                       ("until", frozenset({"archive"})), ("omit_from", frozenset({"reclaim"}))]:
        assert planning_is_forced(SimpleNamespace(**{**quiet, key: value})), key
    # a Snakemake without one of these settings: planning judges every job rather than guess
    for key in quiet:
        assert planning_is_forced(SimpleNamespace(**{k: v for k, v in quiet.items() if k != key})), key
    assert planning_is_forced(None)


def test_the_forcing_settings_are_those_of_the_installed_snakemake() -> None:
    from dataclasses import fields

    from snakemake.settings.types import DAGSettings

    from rlkeep.settled import FORCING_SETTINGS

    assert set(FORCING_SETTINGS) <= {field.name for field in fields(DAGSettings)}
    assert not planning_is_forced(DAGSettings())


def test_the_evidence_of_a_kind_is_what_done_waits_on() -> None:
    """rlkeep.pipeline.evidence_of is the list rules/common.smk gives DONE and rlkeep.settled checks."""
    from rlkeep.kinds import KINDS
    from rlkeep.pipeline import STEP_BY_NAME, evidence_of, steps_for_kind

    for name, spec in KINDS.items():
        evidence = evidence_of("rl-demo", name)
        assert list(evidence) == list(steps_for_kind(name)), name
        assert all(path == f"rl-demo/{STEP_BY_NAME[step].evidence}" for step, path in evidence.items())
    assert "rl-demo/verify/archive.json" in evidence_of("rl-demo", "sft").values()
    assert "rl-demo/verify/model.json" not in evidence_of("rl-demo", "sft").values()


# --------------------------------------------------------------------------- new jobs per invocation


def test_new_jobs_are_taken_in_name_order_up_to_the_limit_and_the_rest_wait() -> None:
    jobs = [f"run-{index}" for index in range(6)]
    started = {"run-4"}                      # a started job is never held back, nor counts as new
    named = {"run-5"}                        # nor is one a --config value names
    planned, waiting, refused = admitted_jobs(jobs, started=started.__contains__, needs_planning=lambda job: True,
                                              named=named.__contains__, max_new_jobs=2)
    assert planned == ["run-0", "run-1", "run-4", "run-5"]
    assert waiting == ["run-2", "run-3"] and refused == []

    planned, waiting, refused = admitted_jobs(jobs, started=started.__contains__, needs_planning=lambda job: True,
                                              named=named.__contains__, max_new_jobs=None)
    assert planned == jobs and waiting == [] and refused == []


def test_a_settled_job_leaves_room_for_no_new_job_and_is_not_planned() -> None:
    jobs = ["a-done", "b-new", "c-new"]
    planned, waiting, refused = admitted_jobs(jobs, started=lambda job: job.endswith("done"),
                                              needs_planning=lambda job: False, named=lambda job: False, max_new_jobs=1)
    assert planned == ["b-new"] and waiting == ["c-new"] and refused == []


def test_a_record_that_does_not_load_is_refused_alone_and_takes_no_place_among_the_new_jobs() -> None:
    jobs = ["a-bad", "b-new", "c-started-bad", "d-named-bad", "e-new", "f-settled-bad", "g-new", "h-bad"]
    bad = {"a-bad", "c-started-bad", "d-named-bad", "f-settled-bad", "h-bad"}
    loaded: list[str] = []

    def loads(job: str) -> bool:
        loaded.append(job)
        return job not in bad

    admission = admitted_jobs(jobs, started=lambda job: "started" in job or "settled" in job,
                              needs_planning=lambda job: "settled" not in job, named=lambda job: "named" in job,
                              max_new_jobs=2, loads=loads)
    assert admission.planned == ["b-new", "e-new"]
    assert admission.waiting == ["g-new"]
    # the waiting ones are checked too (every bad record is named at once); a settled job's record is not read
    assert admission.refused == ["a-bad", "c-started-bad", "d-named-bad", "h-bad"]
    assert "f-settled-bad" not in loaded and sorted(loaded) == sorted(set(jobs) - {"f-settled-bad"})


def test_the_refusal_message_gives_each_records_own_error_on_its_own_line() -> None:
    errors = ["records/a.yaml: unknown key 'stroe' in the top level; expected only: ...",
              "records/b.yaml: field 'base_model' is missing; expected a Hub model id like Qwen/Qwen3-8B ..."]
    first, *lines = refusal_message(errors).splitlines()
    assert first.startswith("rlkeep: 2 records refused; their jobs are not planned, every other record's are.")
    assert "campaign/refused.json" in first and "run the same command again" in first
    assert lines == [f"  {error}" for error in errors]


def test_the_waiting_message_counts_names_and_says_how_to_continue() -> None:
    message = waiting_message([f"run-{index}" for index in range(5)], 100)
    assert "5 records" in message and "run-0, run-1, run-2, ..." in message and "run-4" not in message
    assert "at most 100 new jobs" in message and "max_new_jobs=<n>" in message and "=all" in message


def plannable_record(job: str) -> dict:
    """A valid rl record; planning never reads its store."""
    return {"job": job, "user": "test", "scheduler": "iris", "cluster": "cw-test",
            "chain": [f"/test/{job}"], "store": f"s3://runs/iris/{job}",
            "checkpoint": {"interval": 20, "rule": {"kind": "latest"}}}


def planned_jobs(output: str) -> set[str]:
    return set(re.findall(r"output: ([A-Za-z0-9._-]+)/DONE", output))


def test_the_campaign_target_plans_at_most_max_new_jobs_new_records(data_root: Path) -> None:
    for job in ("rl-a", "rl-b", "rl-c", "rl-d"):
        write_record(data_root, plannable_record(job))
    (data_root / "rl-d" / "logs").mkdir(parents=True)  # started: planned whatever the limit

    plan = run_snakemake(data_root, extra=("-n",), config=("max_new_jobs=1",))
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert planned_jobs(plan.stdout) == {"rl-a", "rl-d"}
    assert "2 records whose job has not started wait for a later invocation (rl-b, rl-c)" in plan.stderr

    everything = run_snakemake(data_root, extra=("-n",), config=("max_new_jobs=all",))
    assert everything.returncode == 0, everything.stderr[-3000:]
    assert planned_jobs(everything.stdout) == {"rl-a", "rl-b", "rl-c", "rl-d"}
    assert "wait for a later invocation" not in everything.stderr

    named = run_snakemake(data_root, "rl-c/DONE", extra=("-n",), config=("max_new_jobs=1",))
    assert named.returncode == 0 and planned_jobs(named.stdout) == {"rl-c"}

    refused = run_snakemake(data_root, extra=("-n",), config=("max_new_jobs=0",))
    assert refused.returncode != 0 and "On instance['max_new_jobs']" in refused.stdout + refused.stderr


def test_a_run_says_which_records_wait_when_it_starts_and_again_when_it_ends(data_root: Path) -> None:
    for job in ("rl-a", "rl-b"):
        write_record(data_root, plannable_record(job))
    # only the chain capture of the admitted job runs; there is no `iris` here, so it fails, and
    # the end of the invocation (onerror) repeats which records wait
    env = {"PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "iris").exists())}
    result = run_snakemake(data_root, extra=("--until", "capture_chain"), config=("max_new_jobs=1",), env=env)
    assert result.returncode != 0
    assert result.stderr.count("1 record whose job has not started waits for a later invocation (rl-b)") == 2
    assert (data_root / "rl-a").is_dir() and not (data_root / "rl-b").exists()
    assert "capture_chain" in result.stderr.split("waits for a later invocation")[1]  # the run came in between
