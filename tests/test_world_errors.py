"""A store the record names that cannot be reached (issue 53): a missing bucket, missing or refused
credentials, an endpoint that does not answer. Each blocks the step with one line naming the
record file and its `store` field and what was seen; STATUS.json's advice is that cause's remedy,
and following it reaches DONE. Against the real S3 server the suite starts."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from rlkeep.runner import run_step
from rlkeep_dev.devserver.s3 import SECRET_KEY
from rlkeep.stepstate import collect_steps
from rlkeep.storage import client as client_module
from rlkeep.sync.step import sync_logs_step
from tests.conftest import run_snakemake, seed_example, write_record
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides
from tests.test_sync import context

JOB = "rl-demo"


def _failed_sync_logs(tmp_path: Path, bucket: str, capsys) -> tuple[str, Path]:
    """Run sync_logs as its rule does; (its last line, the job dir with the line as its log)."""
    ctx = context(tmp_path, bucket, outputs={"tar": tmp_path / "rl-demo/sync/logs.tar",
                                             "manifest": tmp_path / "rl-demo/sync/logs.manifest.json"})
    assert run_step("sync_logs", sync_logs_step, ctx) == 1
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert not any(path.exists() for path in ctx.outputs.values())  # nothing half-written
    logs = tmp_path / "rl-demo" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "sync_logs.log").write_text(said + "\n")
    return said, tmp_path / "rl-demo"


def _endpoint(s3_server) -> str:
    env = s3_server.env()
    return env.get("AWS_ENDPOINT_URL_S3") or env["AWS_ENDPOINT_URL"]


def _advice(job_dir: Path) -> str:
    state = collect_steps(job_dir, "rl")["sync_logs"]
    assert state["status"] == "blocked"
    return state["remaining"]


def test_a_missing_bucket_names_the_record_field_and_advises_correcting_it(tmp_path: Path, s3_server, capsys) -> None:
    said, job_dir = _failed_sync_logs(tmp_path, "no-such-bucket", capsys)
    assert said.startswith("rlkeep: records/rl-demo.yaml: field 'store' is 's3://no-such-bucket/iris/rl-demo': "
                           "its bucket does not exist at " + _endpoint(s3_server)), said
    assert "NoSuchBucket" in said
    assert _advice(job_dir) == "correct the record's store: to the bucket and prefix the run wrote to, then rerun"


@pytest.mark.parametrize("case", ["wrong secret", "unknown key", "none"])
def test_credentials_name_the_variables_the_chain_read(tmp_path: Path, bucket: str, monkeypatch, capsys,
                                                       case: str) -> None:
    monkeypatch.setattr(client_module, "_clients", {})
    monkeypatch.setattr(client_module, "_credentials", {})
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if case == "wrong secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-of-this-key")
    elif case == "unknown key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEYATTHISSTORE")
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        empty = tmp_path / "empty"
        empty.write_text("")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    said, job_dir = _failed_sync_logs(tmp_path, bucket, capsys)
    assert said.startswith(f"rlkeep: records/rl-demo.yaml: field 'store' is 's3://{bucket}/iris/rl-demo': "), said
    if case == "none":
        assert "no credentials to sign with" in said and "the chain found no credentials" in said
        assert "AWS_ACCESS_KEY_ID unset, AWS_SECRET_ACCESS_KEY unset" in said
    else:
        code = "SignatureDoesNotMatch" if case == "wrong secret" else "InvalidAccessKeyId"
        assert f"the store refused the credentials ({code})" in said
        assert "signed with credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" in said
        assert "AWS_ACCESS_KEY_ID set, AWS_SECRET_ACCESS_KEY set" in said
    assert "not-the-secret" not in said and SECRET_KEY not in said  # never a secret's value
    assert _advice(job_dir).startswith("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")


def test_an_endpoint_that_does_not_answer_names_it(tmp_path: Path, bucket: str, monkeypatch, capsys) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("RLKEEP_STEP_RETRIES", "0")
    monkeypatch.setattr(client_module, "_clients", {})
    said, job_dir = _failed_sync_logs(tmp_path, bucket, capsys)
    assert said.startswith(f"rlkeep: records/rl-demo.yaml: field 'store' is 's3://{bucket}/iris/rl-demo': "), said
    assert "the endpoint did not answer" in said and f"is http://127.0.0.1:{port}" in said
    assert _advice(job_dir).startswith("make the endpoint answer, or correct AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL")


def test_no_log_where_a_scheduler_none_run_keeps_them_blocks_in_the_record_words(tmp_path: Path, bucket: str,
                                                                                 capsys) -> None:
    """scheduler none: each attempt's trainer log is only in the store, under layout.logs; an
    empty folder there (here: the store holds only checkpoints) is no completed sync."""
    from rlkeep.storage import open_store

    open_store(f"s3://{bucket}/iris/rl-demo").put_bytes("ckpts/global_step_20/state.json", b"{}")
    said, job_dir = _failed_sync_logs(tmp_path, bucket, capsys)
    assert said == (f"rlkeep: records/rl-demo.yaml: field 'store' is 's3://{bucket}/iris/rl-demo' and layout.logs "
                    f"is 'logs': no object under s3://{bucket}/iris/rl-demo/logs/ (1 listed elsewhere), where a "
                    "scheduler none run keeps each attempt's trainer log. Remedy: correct the record's store: or "
                    "layout.logs to where the run wrote its logs, then rerun"), said
    assert _advice(job_dir) == "correct the record's store: or layout.logs to where the run wrote its logs, then rerun"


def test_following_the_advice_for_a_missing_bucket_reaches_done(data_root: Path, bucket: str, iris,
                                                                hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    wrong = {**record, "store": "s3://no-such-bucket/iris/rl-demo"}
    write_record(data_root, wrong)
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode != 0
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    step = status["steps"]["sync_logs"]
    assert step["status"] == "blocked"
    assert step["reason"].startswith(f"{data_root / 'records' / 'rl-demo.yaml'}: field 'store' is "
                                     "'s3://no-such-bucket/iris/rl-demo': its bucket does not exist"), step["reason"]
    advice = next(item for item in status["remaining_work"] if item["step"] == "sync_logs")
    assert "correct the record's store: to the bucket and prefix the run wrote to" in json.dumps(advice)
    assert not (data_root / JOB / "sync" / "logs.tar").exists()
    assert not (data_root / JOB / "verify" / "model_upload.json").exists()
    assert not (data_root / JOB / "archive" / "MANIFEST").exists()

    write_record(data_root, record)  # the advice followed: the store the run wrote to
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (data_root / JOB / "DONE").is_file()
