"""The real pipeline against every emulated `iris` version, on a chain as real clusters make them.

The chain: an attempt deleted by retention (gone), a finished attempt, a pending resubmission
under a new name and a pending scheduler retry of the same task (back in pending with a failure
recorded). Full `<job>/DONE` runs for V-d (what the runbook was written against) and V-f (the
newest); for the other versions the steps that talk to Iris (chain capture, exact stops, log
sync and the checkpoint listing that waits on them) run, which keeps the suite's time bounded.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from rlkeep_dev.devserver.iris import VERSIONS
from rlkeep.scheduler import IrisCli
from rlkeep.storage import open_store
from tests.conftest import IrisStandin, run_snakemake, seed_example, write_record

FULL_DONE = {"d", "f"}
GONE, FINISHED, RESUBMITTED, RETRY = "/demo/rl-demo", "/demo/rl-demo-r1", "/demo/rl-demo-r2", "/demo/rl-demo-r3"


def messy_chain(data_root: Path, bucket: str, iris: IrisStandin) -> dict:
    """The example run with its chain rewritten to the four kinds of attempt; returns the state before."""
    run, record = seed_example(data_root, bucket, iris, n_trials=12)
    store = open_store(record["store"])
    finished_log = store.read_bytes("logs/rl-demo-r1.out")
    for slug in ("rl-demo-r2", "rl-demo-r3"):  # later attempts that re-logged the same steps
        store.put_bytes(f"logs/{slug}.out", finished_log)
    record["chain"] = [GONE, FINISHED, RESUBMITTED, RETRY]
    write_record(data_root, record)

    state = iris.state()
    jobs = state["jobs"]
    jobs[GONE]["deleted"] = True
    template = jobs.pop(FINISHED)
    jobs[FINISHED] = {**template, "state": "failed", "exit_code": 1,
                      "tasks": [{**template["tasks"][0], "state": "failed", "exit_code": 1}]}
    jobs[FINISHED]["tasks"][0].pop("attempts", None)
    for job_id, failures in ((RESUBMITTED, 0), (RETRY, 1)):
        lines = [line.replace(f"task={FINISHED}/0", f"task={job_id}/0") for line in template["log_lines"]]
        jobs[job_id] = {**template, "state": "pending", "exit_code": None, "failure_count": failures,
                        "log_lines": lines, "tasks": [{**template["tasks"][0], "task_id": f"{job_id}/0"}]}
        if failures:
            jobs[job_id]["tasks"][0]["attempts"] = [{"attempt_id": f"{job_id}/0:0", "state": "failed"},
                                                    {"attempt_id": f"{job_id}/0:1", "state": "pending"}]
        else:
            jobs[job_id]["tasks"][0].pop("attempts", None)
    iris.write_state(state)
    return state


@pytest.fixture(params=VERSIONS)
def viris(request, tmp_path, monkeypatch) -> IrisStandin:
    IrisCli._forms_cache.clear()
    standin = IrisStandin(tmp_path / "iris", request.param)
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    return standin


def test_a_messy_chain_reaches_its_targets_stopping_only_the_pending_attempts_exactly(data_root, bucket, viris) -> None:
    before = messy_chain(data_root, bucket, viris)
    targets = ["rl-demo/DONE"] if viris.version in FULL_DONE else \
        ["rl-demo/sync/logs.tar", "rl-demo/checkpoint/candidates.json"]
    result = run_snakemake(data_root, *targets)
    assert result.returncode == 0, result.stderr[-5000:]

    # the pending resubmission and the pending retry were stopped by exact id; nothing else moved
    assert viris.stop_calls() == [viris.exact_stop(RESUBMITTED), viris.exact_stop(RETRY)]
    after = viris.states()
    changed = {job_id for job_id, job in before["jobs"].items() if after[job_id] != job["state"]}
    assert changed == {RESUBMITTED, RETRY} and after[RESUBMITTED] == after[RETRY] == "killed"

    chain = json.loads((data_root / "rl-demo/chain.json").read_text())
    states = {a["id"]: a["state"] for a in chain["attempts"]}
    assert states == {GONE: "gone", FINISHED: "failed", RESUBMITTED: "pending", RETRY: "pending"}
    gone = chain["attempts"][0]
    assert gone["store_log"].endswith("/logs/rl-demo.out")
    assert ("does not list" if viris.version == "a" else "Error: Job /demo/rl-demo not found") in gone["reason"]
    assert all(a["finished_ms"] is None and a["times_reason"] for a in chain["attempts"])
    assert chain["iris_cli"]["stop"] == "iris job " + " ".join(viris.exact_stop("{job}")[2:])
    assert chain["unrecorded"] == [{"id": "/demo/rl-demo-r10", "state": "failed", "blocks_checkpoint_reads": False}]
    retries = json.loads((data_root / "rl-demo/retries.json").read_text())
    assert [(s["id"], s["state_after"]) for s in retries["stopped"]] == [(RESUBMITTED, "killed"), (RETRY, "killed")]
    if viris.version in {"b", "c", "d", "e"}:  # these print the failure count: the retry is known as one
        assert [s["queued_retry"] for s in retries["stopped"]] == [False, True]

    manifest = json.loads((data_root / "rl-demo/sync/logs.manifest.json").read_text())
    entries = {a["attempt"]: a for a in manifest["attempts"]}
    assert entries["rl-demo"]["completeness"]["status"] == "store_copy"  # gone from the controller
    assert "gone from the controller" in entries["rl-demo"]["completeness"]["how"]
    expected = "store_copy" if viris.version == "f" else "proven"
    assert entries["rl-demo-r1"]["completeness"]["status"] == expected
    with tarfile.open(data_root / "rl-demo/sync/logs.tar") as tar:
        got = tar.extractfile("attempts/rl-demo-r1/trainer.log").read()
    if expected == "proven":  # byte-identical to what the stand-in holds for the attempt
        from rlkeep_dev.devserver.iris import full_log

        assert got.decode() == "".join(line + "\n" for line in full_log(before["jobs"], FINISHED, viris.version))
    if viris.version in FULL_DONE:
        done = json.loads((data_root / "rl-demo/DONE").read_text())
        assert done["retries_stopped"] == [RESUBMITTED, RETRY]


@pytest.mark.parametrize("version", ["b", "e"])
def test_a_log_longer_than_the_cap_comes_from_the_store_and_says_why(data_root, bucket, tmp_path, monkeypatch,
                                                                     version) -> None:
    IrisCli._forms_cache.clear()
    iris = IrisStandin(tmp_path / "iris", version)
    for key, value in iris.env().items():
        monkeypatch.setenv(key, value)
    run, record = seed_example(data_root, bucket, iris, n_trials=12)
    length = len(iris.state()["jobs"]["/demo/rl-demo"]["log_lines"])
    monkeypatch.setenv("RLKEEP_IRIS_LOG_MAX_LINES", str(length // 2))
    result = run_snakemake(data_root, "rl-demo/sync/logs.tar")
    assert result.returncode == 0, result.stderr[-5000:]
    manifest = json.loads((data_root / "rl-demo/sync/logs.manifest.json").read_text())
    entry = next(a for a in manifest["attempts"] if a["attempt"] == "rl-demo")
    assert entry["completeness"]["status"] == "store_copy"
    assert f"longer than one fetch ({length // 2:,} lines per call)" in entry["completeness"]["how"]
    with tarfile.open(data_root / "rl-demo/sync/logs.tar") as tar:
        got = tar.extractfile("attempts/rl-demo/trainer.log").read()
    assert got == open_store(record["store"]).read_bytes("logs/rl-demo.out")
    asked = {int(argv[argv.index("--max-lines") + 1]) for argv in iris.calls() if "logs" in argv and "--help" not in argv}
    assert asked == {length // 2}


def test_an_unrecorded_pending_resubmission_blocks_checkpoint_reads_and_is_never_stopped(data_root, bucket,
                                                                                           iris) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    state = iris.state()
    state["jobs"]["/demo/rl-demo-r2"] = {**state["jobs"]["/demo/other-rl-demo"], "state": "pending"}
    iris.write_state(state)
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode != 0
    status = json.loads((data_root / "rl-demo/STATUS.json").read_text())
    assert "list_checkpoints" in status["blocked"]
    reason = status["steps"]["list_checkpoints"]["reason"]
    assert "/demo/rl-demo-r2 (pending)" in reason and "records/rl-demo.yaml:\n  - /demo/rl-demo-r2\n" in reason
    assert not (data_root / "rl-demo/checkpoint/candidates.json").exists()
    assert "/demo/rl-demo-r2" not in [argv[3] for argv in iris.stop_calls()]
    assert iris.states()["/demo/rl-demo-r2"] == "pending"
    chain = json.loads((data_root / "rl-demo/chain.json").read_text())
    assert {"id": "/demo/rl-demo-r2", "state": "pending", "blocks_checkpoint_reads": True} in chain["unrecorded"]
