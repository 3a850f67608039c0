"""The workflow end to end through real Snakemake subprocesses, as an operator runs it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.conftest import run_snakemake, seed_example, write_record
from tests.support.publishing import publish_overrides

RECORD = {
    "job": "rl-demo",
    "user": "demo",
    "scheduler": "iris",
    "cluster": "cw-test",
    "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"],
    "store": "s3://runs/iris/rl-demo",
    "checkpoint": {"interval": 20},
}


def iris_jobs() -> dict:
    def job(state: str) -> dict:
        return {"state": state, "exit_code": 1, "failure_count": 1, "preemption_count": 0, "tasks": [], "log_lines": []}

    return {"jobs": {"/demo/rl-demo": job("failed"), "/demo/rl-demo-r1": job("pending"),
                     "/demo/rl-demo-r10": job("pending"), "/demo/rl-demo-r1/eval": job("pending")}}


def test_dry_run_prints_the_plan_without_calls_or_writes(data_root: Path, iris) -> None:
    write_record(data_root, RECORD)
    iris.write_state(iris_jobs())
    result = run_snakemake(data_root, "rl-demo/DONE", extra=("-n",))
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    for rule in ("capture_chain", "stop_retries", "done"):
        assert f"rule {rule}:" in out
    assert "This was a dry-run" in out
    assert iris.calls() == []
    assert not (data_root / "rl-demo").exists()


def test_run_stops_exact_pending_retry_writes_done_and_rerun_is_a_no_op(data_root: Path, bucket: str, iris) -> None:
    seed_example(data_root, bucket, iris)
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr
    assert iris.stop_calls() == [iris.exact_stop("/demo/rl-demo-r1")]
    states = {job_id: job["state"] for job_id, job in iris.state()["jobs"].items()}
    assert states["/demo/rl-demo-r1"] == "killed"
    assert [state for job_id, state in states.items() if job_id != "/demo/rl-demo-r1"].count("killed") == 0
    chain = json.loads((data_root / "rl-demo/chain.json").read_text())
    assert [a["state"] for a in chain["attempts"]] == ["failed", "pending"]
    retries = json.loads((data_root / "rl-demo/retries.json").read_text())
    assert retries["status"] == "completed"
    assert [s["id"] for s in retries["stopped"]] == ["/demo/rl-demo-r1"]
    done = json.loads((data_root / "rl-demo/DONE").read_text())
    assert done["job"] == "rl-demo" and done["retries_stopped"] == ["/demo/rl-demo-r1"]
    assert done["terminal_state"].startswith("killed")
    assert all(status in {"completed", "not_applicable"} for status in done["steps"].values())
    assert "## Steps" in (data_root / "rl-demo/REPORT.md").read_text()

    calls_before = len(iris.calls())
    again = run_snakemake(data_root, "rl-demo/DONE")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
    assert len(iris.calls()) == calls_before


def test_editing_an_unrelated_record_field_reruns_only_done(data_root: Path, bucket: str, iris) -> None:
    seed_example(data_root, bucket, iris)
    assert run_snakemake(data_root, "rl-demo/DONE").returncode == 0
    record_file = data_root / "records/rl-demo.yaml"
    record_file.write_text(record_file.read_text().replace("tracker_url: https://", "tracker_url: http://"))
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr
    ran = [line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
           if line.strip().startswith(("rule ", "localrule "))]
    assert ran == ["done"]
    assert json.loads((data_root / "rl-demo/DONE").read_text())["tracker_url"].startswith("http://")

    # the same record with every mapping's fields in reverse order (as a YAML tool that sorts might
    # rewrite it): the params of selection and publication are compared key-sorted, so only DONE
    # (which restates the record's text) runs again, never a selection or an upload
    def reversed_keys(value):
        if isinstance(value, dict):
            return {key: reversed_keys(value[key]) for key in reversed(list(value))}
        return value

    record_file.write_text(yaml.safe_dump(reversed_keys(yaml.safe_load(record_file.read_text())), sort_keys=False))
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr
    ran = [line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
           if line.strip().startswith(("rule ", "localrule "))]
    assert ran == ["done"], ran


def test_bad_record_fails_before_any_work_naming_file_and_field(data_root: Path, iris) -> None:
    write_record(data_root, {**RECORD, "store": "relative/path"})
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode != 0
    assert "records/rl-demo.yaml: field 'store'" in result.stderr
    assert "absolute store URL" in result.stderr
    assert iris.calls() == []
    assert not (data_root / "rl-demo").exists()


def test_blocked_step_is_named_in_status_json(data_root: Path, bucket: str, iris, monkeypatch) -> None:
    seed_example(data_root, bucket, iris)
    monkeypatch.setenv("IRIS_STANDIN_FAIL", "controller")
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode != 0
    status = json.loads((data_root / "rl-demo/STATUS.json").read_text())
    assert status["blocked"] == ["capture_chain"]
    assert "failed to connect to controller" in status["steps"]["capture_chain"]["reason"]
    assert not status["done"]
    assert not (data_root / "rl-demo/DONE").exists()

    monkeypatch.delenv("IRIS_STANDIN_FAIL")
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr
    status = json.loads((data_root / "rl-demo/STATUS.json").read_text())
    assert status["blocked"] == [] and status["done"]


def test_a_staging_asked_again_before_its_upload_still_plans_the_upload_and_done(data_root: Path, bucket: str,
                                                                                  iris) -> None:
    """Found by the kill test: killed just after stage_traces renamed its tree into place, the next
    run redid the staging and planned nothing after it (the upload's only input was ancient), so
    the same command ended 0 without DONE. `--forcerun stage_traces` puts the staging in the same
    state, deterministically."""
    seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    staged = run_snakemake(data_root, "rl-demo/stage/traces")
    assert staged.returncode == 0, staged.stderr[-3000:]
    assert not (data_root / "rl-demo" / "verify" / "traces.json").exists()
    plan = run_snakemake(data_root, "rl-demo/DONE", extra=("-n", "--forcerun", "stage_traces"))
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = set(re.findall(r"^(?:local)?rule (\w+):", plan.stdout + plan.stderr, re.M))
    assert {"stage_traces", "publish_traces", "link_model_card", "done"} - planned == set(), sorted(planned)


def test_a_capture_asked_again_before_its_readers_ran_still_plans_them_and_done(data_root: Path, bucket: str,
                                                                                iris) -> None:
    """The same Snakemake rule as above, for chain.json: a capture killed just after it wrote the
    chain (redone by --rerun-incomplete) must still plan every step that reads it and has not run,
    though chain.json is ancient for its readers while the record's chain is unchanged."""
    seed_example(data_root, bucket, iris)
    captured = run_snakemake(data_root, "rl-demo/chain.json")
    assert captured.returncode == 0, captured.stderr[-3000:]
    plan = run_snakemake(data_root, "rl-demo/DONE", extra=("-n", "--forcerun", "capture_chain"))
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = set(re.findall(r"^(?:local)?rule (\w+):", plan.stdout + plan.stderr, re.M))
    assert {"capture_chain", "stop_retries", "sync_logs", "sync_traces", "done"} - planned == set(), sorted(planned)


def test_correcting_the_store_plans_every_step_that_read_it_again(data_root: Path, bucket: str, iris) -> None:
    """Issue 53: a record's `store:` corrected after a run left out the sync of the logs and the
    listing of the checkpoints (they read the store but had no params naming it). Each step that
    reads the store now carries the store and the layout folders it lists as params."""
    seed_example(data_root, bucket, iris)
    assert run_snakemake(data_root, "rl-demo/DONE").returncode == 0
    record_file = data_root / "records/rl-demo.yaml"
    store = yaml.safe_load(record_file.read_text())["store"]
    record_file.write_text(record_file.read_text().replace(store, store + "-corrected"))
    result = run_snakemake(data_root, "rl-demo/DONE", extra=("-n",))
    assert result.returncode == 0, result.stderr
    planned = {line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
               if line.strip().startswith(("rule ", "localrule ", "checkpoint "))}
    assert {"sync_logs", "sync_traces", "list_checkpoints", "done"} <= planned, planned
    # the chain's capture reads no store: it is not redone
    assert "capture_chain" not in planned, planned
