"""Permanent errors fail once, transient ones keep bounded retries (issue 28).

Snakemake's `retries` cannot tell the two apart, so the profiles set it to 0 and a step tries a
transient failure (rlkeep.errors.TransientError: a network error, a 5xx) again in its own process
(rlkeep.runner.run_step). Once-ness is counted in the step's log, never timed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from rlkeep.context import StepContext
from rlkeep.errors import RecordError, RlkeepError, TransientError
from rlkeep.records import load_record
from rlkeep.runner import run_step
from rlkeep.storage.failures import StoreUnavailable
from tests.conftest import REPO, run_snakemake, write_record
from tests.support.hub import hub_server, no_client_backoff  # noqa: F401 - fixtures

JOB = "rl-demo"
STARTED = "INFO step capture_chain (rlkeep.scheduler.step:capture_chain_step) for job rl-demo"


def test_a_missing_iris_fails_once(data_root: Path) -> None:
    write_record(data_root, {"job": JOB, "user": "demo", "scheduler": "iris", "cluster": "cw-test",
                             "chain": [f"/demo/{JOB}"], "store": "file:///nonexistent/store",
                             "checkpoint": {"interval": 20}})
    # this interpreter's folder and the system's, none of which holds an `iris`
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    result = run_snakemake(data_root, f"{JOB}/chain.json", env={"PATH": path})
    assert result.returncode != 0
    log = (data_root / JOB / "logs" / "capture_chain.log").read_text()
    assert log.count(STARTED) == 1, log  # one try of the step, no try 2
    assert log.count("the `iris` command is not on PATH") == 1, log
    output = result.stdout + result.stderr
    assert "Trying to restart job" not in output
    assert output.count("rlkeep: the `iris` command is not on PATH") == 1, output[-3000:]


def test_every_profile_leaves_retries_to_the_steps() -> None:
    for profile in ("iris", "local", "slurm"):
        settings = yaml.safe_load((REPO / "profiles" / profile / "profile.yaml").read_text())
        assert settings["retries"] == 0, profile


# A step whose function is below: each try appends a line to tries.txt.
FLAKY = "flaky"
FAILURES: dict[str, list[Exception]] = {}


def flaky_step(ctx: StepContext) -> None:
    with open(ctx.job_dir / "tries.txt", "a") as tries:
        tries.write("try\n")
    pending = FAILURES[ctx.job]
    if pending:
        raise pending.pop(0)
    ctx.outputs["out"].write_text("made\n")


def context(tmp_path: Path) -> StepContext:
    records = tmp_path / "records"
    records.mkdir()
    (records / f"{JOB}.yaml").write_text(yaml.safe_dump({
        "job": JOB, "user": "demo", "scheduler": "none", "chain": [f"/demo/{JOB}"], "store": "file:///x",
        "checkpoint": {"interval": 20}}))
    (tmp_path / JOB).mkdir()
    return StepContext(job=JOB, record=load_record(records / f"{JOB}.yaml"), data_root=tmp_path, inputs={},
                       outputs={"out": tmp_path / JOB / "out.txt"})


@pytest.mark.parametrize(("failures", "status", "tries", "made"), [
    ([StoreUnavailable("s3://b/k: failed after 5 attempts: reset")], 0, 2, True),  # transient, then fine
    ([TransientError("x"), TransientError("x"), TransientError("still down")], 1, 3, False),  # bounded
    ([RecordError("records/rl-demo.yaml: field 'cluster' is missing")], 1, 1, False),  # permanent: once
    ([StoreUnavailable("down"), RecordError("refused")], 1, 2, False),  # a permanent one ends the tries
])
def test_transient_failures_are_tried_again_and_permanent_ones_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        failures: list[Exception], status: int, tries: int, made: bool) -> None:
    monkeypatch.setenv("RLKEEP_STEP_RETRY_WAIT", "0")
    ctx = context(tmp_path)
    FAILURES[JOB] = list(failures)
    assert run_step(FLAKY, flaky_step, ctx) == status
    assert (ctx.job_dir / "tries.txt").read_text().count("try") == tries
    assert ctx.outputs["out"].is_file() == made
    said = capsys.readouterr().err
    assert said.count("rlkeep: ") == (0 if status == 0 else 1), said  # the reason, said once
    if tries == 3:
        assert "rlkeep: still down (a transient failure, 3 tries; rerun later)" in said


def test_no_retries_when_the_operator_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLKEEP_STEP_RETRIES", "0")
    ctx = context(tmp_path)
    FAILURES[JOB] = [StoreUnavailable("down")]
    assert run_step(FLAKY, flaky_step, ctx) == 1
    assert (ctx.job_dir / "tries.txt").read_text().count("try") == 1


@pytest.mark.parametrize(("status", "transient"), [(503, True), (500, True), (403, False), (404, False)])
def test_a_hub_answer_is_transient_only_when_another_try_may_change_it(
        hub_server, tmp_path: Path, no_client_backoff: None, status: int, transient: bool) -> None:
    """Through the real client and the Hub-compatible server: a 5xx that outlasts the client's own
    retries is a TransientError (the step tries again); a 403 or 404 is permanent."""
    from rlkeep.hub import download_fresh, publish_model
    from tests.test_hub import hub_kwargs, stage_model

    commit = publish_model(stage_model(tmp_path / "stage"), "laion/kinds", private=True, commit_message="x",
                           **hub_kwargs(hub_server))["commit"]
    hub_server.fail_next("download", 100, status=status)
    with pytest.raises(RlkeepError, match=r"laion/kinds.*download") as raised:
        download_fresh("laion/kinds", tmp_path / "dl", repo_type="model", revision=commit, **hub_kwargs(hub_server))
    assert isinstance(raised.value, TransientError) is transient, raised.value
