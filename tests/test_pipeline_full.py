"""The whole pipeline on a generated run: S3 (SeaweedFS), the Hub server, the Iris stand-in.

These are the runbook's promises checked end to end: every preservation step completes, no
planted secret reaches the Hub or the archive destination, independent steps complete while
another is blocked, reclamation acts only under authority for exactly this job.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

from rlkeep.storage import open_store
from tests.conftest import run_snakemake, seed_example
from tests.support.hub import hub_server, stored_blobs  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"


def archive_bytes(bucket: str) -> bytes:
    store = open_store(f"s3://{bucket}/archives")
    found = {info.key: store.read_bytes(info.key) for info in store.list()}
    assert f"{JOB}/{JOB}_archive.tgz" in found and f"{JOB}/MANIFEST" in found
    return gzip.decompress(found[f"{JOB}/{JOB}_archive.tgz"]) + found[f"{JOB}/MANIFEST"]


def test_full_run_publishes_verifies_archives_and_leaks_nothing(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode == 0, result.stderr[-4000:]

    done = json.loads((data_root / JOB / "DONE").read_text())
    assert {status for status in done["steps"].values()} <= {"completed", "not_applicable"}
    assert done["steps"]["register"] == "completed" and done["steps"]["publish_model"] == "completed"
    assert done["steps"]["reclaim"] == "not_applicable"  # no authority given
    assert done["artifacts"] == {"weights": "present", "tokenizer_configuration": "present",
                                 "training_logs": "present", "training_traces_link": "present"}
    assert done["checkpoint"]["step"] in run.complete_ckpt_steps
    assert done["destinations"]["model_commit"] and done["destinations"]["traces_commit"]
    assert done["registration"]["status"] == "completed"
    assert done["remaining_work"] == []

    # No planted secret, in any form we planted it, reaches a destination.
    hub_bytes = [data for _, _, data in stored_blobs(hub_server.root)]
    archived = archive_bytes(bucket)
    for secret in run.planted_secrets:
        value = secret["value"].encode()
        assert not any(value in blob for blob in hub_bytes), f"{secret['kind']} reached the Hub"
        assert value not in archived, f"{secret['kind']} reached the archive destination"
    # ... and the pipeline's own credentials appear in no log, sentinel or report.
    credentials = [os.environ["AWS_SECRET_ACCESS_KEY"].encode(), hub_server.token.encode()]
    for path in (data_root / JOB).rglob("*"):
        if path.is_file() and "sync" not in path.parts and ".work" not in path.parts:
            content = path.read_bytes()
            assert not any(c in content for c in credentials), f"a credential appears in {path}"
    assert not any(c in result.stdout.encode() + result.stderr.encode() for c in credentials)

    again = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert "Nothing to be done" in again.stdout + again.stderr


def test_reclaim_needs_authority_for_exactly_this_job(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    env = env_for(hub_server)
    assert run_snakemake(data_root, f"{JOB}/DONE", env=env).returncode == 0
    store = open_store(record["store"])
    before = {info.key: info.size for info in store.list()}

    other = run_snakemake(data_root, f"{JOB}/DONE", env=env, config=("reclaim_authorized=another-job",))
    assert other.returncode == 0
    assert {info.key for info in store.list()} == set(before)
    assert json.loads((data_root / JOB / "reclaim.json").read_text())["status"] == "not_applicable"

    late = "trace_jobs/written-after-sync/result.json"
    store.put_bytes(late, b"{}")
    granted = run_snakemake(data_root, f"{JOB}/DONE", env=env, config=(f"reclaim_authorized={JOB}",))
    assert granted.returncode == 0, granted.stderr[-3000:]
    reclaim = json.loads((data_root / JOB / "reclaim.json").read_text())
    assert reclaim["status"] == "completed"
    assert reclaim["deleted_keys"] == len(before) and reclaim["deleted_bytes"] == sum(before.values())
    assert [info.key for info in store.list()] == [late]  # only what no manifest listed survives
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["reclaimed"]["keys"] == len(before)

    # a later invocation without authority still reports the reclamation that happened
    later = run_snakemake(data_root, f"{JOB}/DONE", env=env)
    assert later.returncode == 0
    assert json.loads((data_root / JOB / "reclaim.json").read_text())["deleted_keys"] == len(before)


def test_no_rule_blocks_selection_but_not_the_independent_steps(data_root: Path, bucket: str, iris, hub_server) -> None:
    overrides = publish_overrides(bucket, data_root)
    run, record = seed_example(data_root, bucket, iris, record_overrides=overrides)
    record["checkpoint"].pop("rule")
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode != 0
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert "select_checkpoint" in status["blocked"]
    reason = status["steps"]["select_checkpoint"]["reason"]
    for step in run.complete_ckpt_steps:
        assert str(step) in reason
    assert "checkpoint.rule" in reason
    for independent in ("sync_logs", "sync_traces", "metric_surface", "publish_traces", "archive", "verify_archive"):
        assert independent in status["completed"], independent
    assert {"export_model", "publish_model", "register", "reclaim"} <= set(status["pending"])
    assert not (data_root / JOB / "DONE").exists() and not (data_root / JOB / "model").exists()

    record["checkpoint"]["rule"] = {"kind": "latest"}
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    resumed = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ran = {line.split()[-1].rstrip(":") for line in (resumed.stdout + resumed.stderr).splitlines()
           if line.strip().startswith(("rule ", "localrule "))}
    assert "sync_traces" not in ran and "publish_traces" not in ran and "archive" not in ran
    assert json.loads((data_root / JOB / "DONE").read_text())["checkpoint"]["step"] == max(run.complete_ckpt_steps)


def test_without_destinations_publication_is_not_applicable(data_root: Path, bucket: str, iris) -> None:
    seed_example(data_root, bucket, iris)
    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-3000:]
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["steps"]["publish_model"] == "not_applicable"
    assert done["steps"]["publish_traces"] == "not_applicable"
    assert done["steps"]["register"] == "not_applicable"
    assert done["artifacts"]["training_logs"] == "not_applicable"
    assert done["artifacts"]["weights"] == "present"  # the flat model exists locally
    assert done["destinations"] == "not_applicable"
    assert not (data_root / JOB / "stage").exists()


@pytest.mark.parametrize("bad", ["rl-demo;rm -rf", "../escape"])
def test_targets_with_unsafe_job_names_match_no_rule(data_root: Path, bad: str) -> None:
    result = run_snakemake(data_root, f"{bad}/DONE", extra=("-n",))
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "MissingRuleException" in out or "No rule to produce" in out
