"""Issue 28, "a job that ended is still pending": what rlkeep learned from Iris while a job had not
ended is asked again by the next invocation, and a look-alike the operator declares not to be an
attempt (`chain_excludes:`) holds nothing.

The operator tests run the real pipeline against the strict Iris stand-in and follow the advice
rlkeep wrote in STATUS.json word for word: let the job end (the stand-in's state changes), or put
the lines it prints under `chain_excludes:`, then the same command again.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlkeep.chain_recapture import (CAPTURE_BOOKKEEPING, captured_for, read_bookkeeping, recapture_settings,
                                    recapture_token, write_bookkeeping)
from rlkeep.errors import RecordError
from rlkeep.records import load_record
from rlkeep.scheduler.iris import IrisScheduler
from rlkeep.scheduler.none import NoScheduler
from rlkeep.scheduler.slurm import SlurmScheduler
from rlkeep.scheduler.step import split_excluded
from tests.conftest import IrisStandin, run_snakemake, seed_example

JOB = "rl-demo"
RETRY = "/demo/rl-demo-r1"  # the example chain's last attempt: a queued scheduler retry
LOOK_ALIKE = "/demo/rl-demo-r20"  # extends the run's id like a resubmission would
EVAL_JOB = "/demo/rl-demo-r1-eval"  # an eval job named like an attempt


# ---- the record field -------------------------------------------------------------------------

def record_data(**changes: object) -> dict:
    data = {"job": JOB, "user": "demo", "scheduler": "iris", "cluster": "cw-test",
            "chain": ["/demo/rl-demo", RETRY], "store": "s3://bucket/iris/rl-demo", "checkpoint": {"interval": 10}}
    data.update(changes)
    return data


def write_record_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "records" / f"{JOB}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_chain_excludes_is_optional_and_kept_in_order(tmp_path: Path) -> None:
    assert load_record(write_record_file(tmp_path, record_data())).chain_excludes == ()
    record = load_record(write_record_file(tmp_path, record_data(chain_excludes=[EVAL_JOB, LOOK_ALIKE])))
    assert record.chain_excludes == (EVAL_JOB, LOOK_ALIKE)


@pytest.mark.parametrize("excludes, field_text, expected_text", [
    ([EVAL_JOB, RETRY], f"field 'chain_excludes[1]' is '{RETRY}', which 'chain' also names",
     "remove it from one of the two"),
    (["/other/rl-demo-r1-eval"], "field 'chain_excludes[0]' is '/other/rl-demo-r1-eval'",
     "expected an Iris job id in the user's namespace"),
    (["rl-demo-r1-eval"], "field 'chain_excludes[0]' is \"rl-demo-r1-eval\"", "none also in chain"),
    ([EVAL_JOB, EVAL_JOB], "field 'chain_excludes' is", "each once"),
    (EVAL_JOB, "field 'chain_excludes' is", "a list of job ids"),
], ids=["also-in-chain", "other-user", "not-a-job-id", "twice", "not-a-list"])
def test_a_bad_chain_excludes_names_the_file_and_the_field(tmp_path: Path, excludes: object, field_text: str,
                                                           expected_text: str) -> None:
    path = write_record_file(tmp_path, record_data(chain_excludes=excludes))
    with pytest.raises(RecordError) as caught:
        load_record(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field_text}"), message
    assert expected_text in message, message


# ---- when a capture is final, and the params that make a non-final one run again ---------------

def test_a_capture_is_final_unless_an_attempt_runs_or_a_look_alike_has_not_ended() -> None:
    iris = IrisScheduler.__new__(IrisScheduler)  # is_final reads only the class's states
    ended = [{"id": "/u/j", "state": "gone"}, {"id": "/u/j-r1", "state": "killed"}]
    assert iris.is_final(ended, [])
    assert iris.is_final(ended + [{"id": "/u/j-r2", "state": "pending"}], [])  # stop_retries ends it
    assert not iris.is_final(ended + [{"id": "/u/j-r2", "state": "running"}], [])
    assert not iris.is_final(ended, [{"id": "/u/j-r20", "state": "pending"}])
    assert iris.is_final(ended, [{"id": "/u/j-r20", "state": "failed"}])
    slurm = SlurmScheduler.__new__(SlurmScheduler)
    assert not slurm.is_final([{"id": "12", "state": "running"}], [])
    assert slurm.is_final([{"id": "12", "state": "requeued"}, {"id": "13", "state": "unknown"}], [])
    assert NoScheduler.__new__(NoScheduler).is_final([{"id": "/u/j", "state": "unknown"}], [])


def test_an_excluded_look_alike_is_recorded_with_its_state_and_no_longer_unrecorded() -> None:
    unrecorded = [{"id": EVAL_JOB, "state": "pending", "blocks_checkpoint_reads": True},
                  {"id": LOOK_ALIKE, "state": "running", "blocks_checkpoint_reads": True}]
    kept, excluded = split_excluded(unrecorded, (EVAL_JOB, "/demo/rl-demo-r7"))
    assert kept == [unrecorded[1]]
    assert excluded == [{"id": EVAL_JOB, "state": "pending"}, {"id": "/demo/rl-demo-r7", "state": None}]


def test_the_recapture_token_runs_a_non_final_capture_again_and_never_a_final_one(tmp_path: Path) -> None:
    job_dir = tmp_path / JOB
    assert recapture_settings(job_dir) == {}  # never captured: the params a chain had before this key

    # Snakemake compares the params it recorded for the capture (computed at planning, before it
    # ran) with the params of the next invocation: follow that through a sequence of captures.
    recorded = recapture_settings(job_dir)
    for final in (False, False, True):
        entry = write_bookkeeping(job_dir, final)
        assert entry["captured_under"] == recorded.get("recapture")  # what the step ran under
        now = recapture_settings(job_dir)
        assert (now != recorded) is (not final)  # params changed: Snakemake captures again
        recorded = now
    assert recapture_settings(job_dir) == recorded  # final: stable from now on

    other = tmp_path / "other"
    write_bookkeeping(other, True)
    assert recapture_settings(other) == {}  # final at the first capture: params as before this key
    (other / CAPTURE_BOOKKEEPING).write_text("{not json")
    assert read_bookkeeping(other) is None and recapture_token(None) is None


# ---- the operator tests ------------------------------------------------------------------------

def add_job(iris: IrisStandin, job_id: str, state: str) -> None:
    jobs = iris.state()["jobs"]
    template = jobs["/demo/other-rl-demo"]  # a bystander with one task and no log
    set_states(iris, {job_id: state}, {**template, "tasks": [{**template["tasks"][0], "task_id": f"{job_id}/0"}]})


def set_states(iris: IrisStandin, states: dict[str, str], template: dict | None = None) -> None:
    """The jobs change state on the cluster (what the operator waits for, or does by hand)."""
    state = iris.state()
    for job_id, value in states.items():
        job = state["jobs"].setdefault(job_id, dict(template or {}))
        job["state"] = value
        job["tasks"] = [{**task, "state": value} for task in job["tasks"]]
        job.pop("attempts", None)
    iris.write_state(state)


def held_back(data_root: Path, step: str) -> str:
    """The reason STATUS.json gives for a blocked step (the advice the operator follows)."""
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert step in status["blocked"], status["blocked"]
    return status["steps"][step]["reason"]


def planned(result) -> list[str]:
    """What Snakemake ran and why (the failure message of a rerun that was not a no-op)."""
    return re.findall(r"^(?:localrule|rule) \w+:|^    reason: .*$", result.stdout + result.stderr, re.M)


def chain_json(data_root: Path) -> dict:
    return json.loads((data_root / JOB / "chain.json").read_text())


def test_a_run_held_by_a_pending_look_alike_reaches_done_once_it_ended(data_root, bucket, iris) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    add_job(iris, LOOK_ALIKE, "pending")

    held = run_snakemake(data_root, f"{JOB}/DONE")
    assert held.returncode != 0
    reason = held_back(data_root, "list_checkpoints")
    assert f"{LOOK_ALIKE} (pending)" in reason
    assert "Otherwise let it end or stop it yourself, then rerun" in reason
    assert chain_json(data_root)["final"] is False
    finished = {name: (data_root / JOB / name).stat().st_mtime_ns
                for name in ("retries.json", "sync/logs.manifest.json", "sync/trace_jobs.manifest.json")}

    set_states(iris, {LOOK_ALIKE: "failed"})  # the look-alike ended
    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-5000:]
    chain = chain_json(data_root)
    assert chain["final"] is True and chain["chain_excludes"] == []
    assert {"id": LOOK_ALIKE, "state": "failed", "blocks_checkpoint_reads": False} in chain["unrecorded"]
    assert (data_root / JOB / "checkpoint/candidates.json").is_file()
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["retries_stopped"] == [RETRY] and done["chain_excludes"] == []
    # asking again ran only what the answer held back: the finished steps were not redone
    assert {name: (data_root / JOB / name).stat().st_mtime_ns for name in finished} == finished
    assert iris.stop_calls() == [iris.exact_stop(RETRY)]

    calls = len(iris.calls())  # a final capture is never asked again
    again = run_snakemake(data_root, f"{JOB}/DONE")
    assert "Nothing to be done" in again.stdout + again.stderr, planned(again)
    assert len(iris.calls()) == calls


def test_a_pending_look_alike_declared_in_chain_excludes_holds_nothing_and_done_names_it(
        data_root, bucket, iris) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    add_job(iris, EVAL_JOB, "pending")

    held = run_snakemake(data_root, f"{JOB}/DONE")
    assert held.returncode != 0
    reason = held_back(data_root, "list_checkpoints")
    assert "add the same lines under `chain_excludes:` instead and rerun" in reason
    record_file, lines = re.search(r"add it to `chain:` in (\S+):\n((?:  - \S+\n)+)", reason).groups()
    assert lines == f"  - {EVAL_JOB}\n"
    with open(data_root / record_file, "a", encoding="utf-8") as record:  # the advice, as printed
        record.write("chain_excludes:\n" + lines)

    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-5000:]
    assert iris.states()[EVAL_JOB] == "pending"  # rlkeep never stops a job the record does not name
    assert chain_json(data_root)["chain_excludes"] == [{"id": EVAL_JOB, "state": "pending"}]
    assert EVAL_JOB not in [entry["id"] for entry in chain_json(data_root)["unrecorded"]]
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["chain_excludes"] == [{"id": EVAL_JOB, "state": "pending"}]
    assert f"{EVAL_JOB} (pending)" in (data_root / JOB / "REPORT.md").read_text()

    calls = len(iris.calls())  # still pending, but excluded: the capture is final
    again = run_snakemake(data_root, f"{JOB}/DONE")
    assert "Nothing to be done" in again.stdout + again.stderr, planned(again)
    assert len(iris.calls()) == calls


def test_a_recorded_attempt_that_was_running_is_asked_again_once_it_ended(data_root, bucket, iris) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    set_states(iris, {RETRY: "running"})

    held = run_snakemake(data_root, f"{JOB}/DONE")
    assert held.returncode != 0
    reason = held_back(data_root, "stop_retries")
    assert f"attempt {RETRY} is still running" in reason and "wait for it to end or stop it yourself" in reason

    set_states(iris, {RETRY: "failed"})  # it ended
    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-5000:]
    assert [a["state"] for a in chain_json(data_root)["attempts"]] == ["failed", "failed"]
    assert iris.stop_calls() == []  # it ended by itself: nothing to stop
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["retries_stopped"] == [] and done["terminal_state"].startswith("failed")


def test_a_pending_look_alike_added_to_chain_as_advised_is_stopped_before_checkpoints_are_read(
        data_root, bucket, iris) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    resubmitted = "/demo/rl-demo-r2"
    add_job(iris, resubmitted, "pending")

    held = run_snakemake(data_root, f"{JOB}/DONE")
    assert held.returncode != 0
    reason = held_back(data_root, "list_checkpoints")
    record_file, lines = re.search(r"add it to `chain:` in (\S+):\n((?:  - \S+\n)+)", reason).groups()
    assert "rlkeep then stops it by exact id if it is still pending" in reason
    record = yaml.safe_load((data_root / record_file).read_text())
    record["chain"] += [line.removeprefix("  - ") for line in lines.splitlines()]  # the advice, as printed
    (data_root / record_file).write_text(yaml.safe_dump(record, sort_keys=False))

    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-5000:]
    # a new chain is not ancient: the retries are stopped again, now including it, and its log synced
    assert iris.stop_calls() == [iris.exact_stop(RETRY), iris.exact_stop(resubmitted)]
    assert iris.states()[resubmitted] == "killed"
    retries = json.loads((data_root / JOB / "retries.json").read_text())
    assert [s["id"] for s in retries["stopped"]] == [resubmitted]
    manifest = json.loads((data_root / JOB / "sync/logs.manifest.json").read_text())
    assert "rl-demo-r2" in [entry["attempt"] for entry in manifest["attempts"]]
    assert json.loads((data_root / JOB / "DONE").read_text())["chain"][-1] == resubmitted


def test_readers_ignore_a_new_capture_only_of_the_same_chain_by_this_rlkeep(tmp_path: Path) -> None:
    job_dir = tmp_path / JOB
    job_dir.mkdir()
    (job_dir / "chain.json").write_text(json.dumps({"attempts": [{"id": "/demo/rl-demo"}, {"id": RETRY}],
                                                    "scheduler": "iris", "cluster": "cw-test"}))
    chain = ["/demo/rl-demo", RETRY]
    assert not captured_for(job_dir, chain, "iris", "cw-test")  # captured before the bookkeeping existed
    write_bookkeeping(job_dir, True)
    assert captured_for(job_dir, chain, "iris", "cw-test")
    assert not captured_for(job_dir, chain + ["/demo/rl-demo-r2"], "iris", "cw-test")  # chain: edited
    assert not captured_for(job_dir, chain, "iris", "cw-other")
