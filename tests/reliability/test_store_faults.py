"""The object store misbehaving: a fault-injecting proxy in front of the real S3 server (connection
resets, 503 SlowDown, 500, truncated bodies, stalls). At 10% faulty requests the pipeline completes
with the outputs of a clean run; when every request fails it stops with a clear message naming the
store, and loses nothing.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, SOAK, Reference, clean_reference, leftovers, output_problems, read_json, run_logged, seed, stable_done,
    tar_digests,
)
from tests.support.faultproxy import FAULT_KINDS, FaultProxy
from tests.support.hub import hub_server  # noqa: F401 - fixture

FAILING_KINDS = tuple(kind for kind in FAULT_KINDS if kind != "stall")  # a stall ends in a good answer
SOAK_TRIALS = 300  # the example's default size
# a failing store fails the same way every try; the step's own retries would only triple the wait
NO_STEP_RETRY = {"RLKEEP_STEP_RETRIES": "0"}


@pytest.fixture(scope="session")
def reference(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return clean_reference(s3_server, tmp_path_factory.mktemp("reference"))


def faults_by_kind(proxy: FaultProxy) -> dict[str, int]:
    return dict(Counter(outcome for _, _, outcome in proxy.log if outcome != "ok"))


def test_ten_percent_faulty_requests_give_the_outputs_of_a_clean_run(data_root: Path, bucket: str, iris, hub_server,
                                                                    s3_server, reference: Reference) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    source_keys = scenario.store_keys()
    with FaultProxy(s3_server.endpoint, rate=0.10, seed=9, stall_seconds=1.0) as proxy:
        result = run_logged(scenario, f"{JOB}/DONE", config=(f"reclaim_authorized={JOB}",),
                            AWS_ENDPOINT_URL_S3=proxy.endpoint)
        injected = faults_by_kind(proxy)
        requests = len(proxy.log)
    figures_log.record("store_faults", rate=0.10, requests=requests, injected=injected, lost=0)
    assert result.returncode == 0, result.stderr[-5000:]
    assert set(injected) == set(FAULT_KINDS), injected  # every kind of fault was met at least once
    assert sum(injected.values()) >= 0.05 * requests
    job_dir = scenario.job_dir
    assert tar_digests(job_dir) == reference.tar_sha256
    assert {f["path"]: f["sha256"] for f in read_json(job_dir / "export.json")["files"]} == reference.export_files
    assert stable_done(scenario) == reference.done_reclaimed
    assert output_problems(job_dir) == [] and leftovers(job_dir) == []
    reclaim = read_json(job_dir / "reclaim.json")
    assert reclaim["deleted_keys"] == len(source_keys) and scenario.store_keys() == {}


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="soak variant: set RLKEEP_SOAK=1")
def test_soak_five_percent_faults_on_the_full_size_example(data_root: Path, bucket: str, iris, hub_server, s3_server,
                                                          tmp_path_factory) -> None:
    reference = clean_reference(s3_server, tmp_path_factory.mktemp("reference-full"), n_trials=SOAK_TRIALS)
    scenario = seed(data_root, bucket, iris, hub_server, n_trials=SOAK_TRIALS)
    with FaultProxy(s3_server.endpoint, rate=0.05, seed=11, stall_seconds=1.0) as proxy:
        result = run_logged(scenario, f"{JOB}/DONE", config=(f"reclaim_authorized={JOB}",),
                            AWS_ENDPOINT_URL_S3=proxy.endpoint)
        injected = faults_by_kind(proxy)
    figures_log.record("store_faults", rate=0.05, requests=len(proxy.log), injected=injected, lost=0)
    assert result.returncode == 0, result.stderr[-5000:]
    assert tar_digests(scenario.job_dir) == reference.tar_sha256
    assert stable_done(scenario) == reference.done_reclaimed


def test_a_store_that_always_fails_blocks_clearly_and_loses_nothing(data_root: Path, bucket: str, iris, hub_server,
                                                                    s3_server) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    source_keys = scenario.store_keys()
    with FaultProxy(s3_server.endpoint, rate=1.0, seed=3, rate_kinds=FAILING_KINDS) as proxy:
        result = run_logged(scenario, f"{JOB}/DONE", config=(f"reclaim_authorized={JOB}",), **NO_STEP_RETRY,
                            AWS_ENDPOINT_URL_S3=proxy.endpoint)
        injected = faults_by_kind(proxy)
    figures_log.record("store_faults", rate=1.0, requests=sum(injected.values()), injected=injected, lost=0)
    assert result.returncode != 0
    job_dir = scenario.job_dir
    status = read_json(job_dir / "STATUS.json")
    store_steps = {"sync_logs", "sync_traces", "list_checkpoints"}
    assert store_steps <= set(status["blocked"]), status
    for step in store_steps:
        reason = status["steps"][step]["reason"]
        assert scenario.record["store"] in reason or f"s3://{scenario.bucket}" in reason, (step, reason)
        assert "unexpected error" not in reason
    assert {"capture_chain", "stop_retries"} <= set(status["completed"])
    assert not (job_dir / "DONE").exists()
    # Nothing lost: every source object is still there (reclamation was authorized, and did not act).
    assert scenario.store_keys() == source_keys
    assert not (job_dir / "reclaim.json").exists()
    # Nothing partial: no sync tar, manifest or later target, no temp file.
    for rel in ("sync/logs.tar", "sync/trace_jobs.tar", "sync/logs.manifest.json", "checkpoint/candidates.json",
                "archive/MANIFEST", "verify/model.json", "verify/traces.json"):
        assert not (job_dir / rel).exists(), rel
    assert output_problems(job_dir) == [] and leftovers(job_dir) == []
    assert_no_credentials(scenario, result)

    # Listing works again but every object read fails (presigned GETs carry the signature in the URL).
    with FaultProxy(s3_server.endpoint) as proxy:
        proxy.fail_next("reset", 10**9, method="GET", query_contains="Signature=")
        again = run_logged(scenario, f"{JOB}/DONE", config=(f"reclaim_authorized={JOB}",), **NO_STEP_RETRY,
                           AWS_ENDPOINT_URL_S3=proxy.endpoint)
        injected = faults_by_kind(proxy)
    figures_log.record("store_faults", rate="object reads", requests=sum(injected.values()), injected=injected, lost=0)
    assert again.returncode != 0
    status = read_json(job_dir / "STATUS.json")
    for step in ("sync_logs", "sync_traces"):
        assert step in status["blocked"], status
        reason = status["steps"][step]["reason"]
        assert f"s3://{scenario.bucket}/iris/{JOB}/" in reason and "read failed" in reason, reason
    assert scenario.store_keys() == source_keys
    assert not (job_dir / "sync" / "logs.tar").exists() and not (job_dir / "sync" / "trace_jobs.tar").exists()
    assert output_problems(job_dir) == [] and leftovers(job_dir) == []
    assert_no_credentials(scenario, again)


def assert_no_credentials(scenario, result) -> None:
    """Error messages name the store and the object, never a credential or a signed URL."""
    job_dir = scenario.job_dir
    text = "".join(p.read_text(errors="replace") for p in job_dir.rglob("*") if p.is_file() and p.suffix != ".tar")
    text += result.stdout + result.stderr
    text += "".join(p.read_text(errors="replace") for p in (scenario.data_root / ".snakemake" / "log").glob("*.log"))
    assert scenario.s3_secret not in text
    assert "Signature=" not in text and "X-Amz-Credential" not in text and "AWSAccessKeyId=" not in text
