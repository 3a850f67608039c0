"""Concurrent invocations in one data root: two different jobs at the same time both complete; a second
invocation on a job that is already running is refused by Snakemake's lock with a clear message, and
the first one completes with the outputs of a clean run.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, Pipeline, Reference, clean_reference, leftovers, output_problems, publication_problems, read_json, seed,
    stable_done, tar_digests, wait_for,
)
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.test_views import assert_views_are_a_fresh_render

OTHER = "rl-demo-b"


@pytest.fixture(scope="session")
def reference(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return clean_reference(s3_server, tmp_path_factory.mktemp("reference"))


def holds_lock(data_root: Path, job: str) -> bool:
    """Snakemake has locked this job's outputs (its output lock lists <job>/DONE)."""
    for lock in (data_root / ".snakemake" / "locks").glob("*.output.lock"):
        try:
            if f"{job}/DONE" in lock.read_text():
                return True
        except FileNotFoundError:
            continue
    return False


def test_two_jobs_run_at_once_and_a_second_run_of_the_same_job_is_refused(data_root: Path, bucket: str, iris,
                                                                           hub_server, reference: Reference) -> None:
    first = seed(data_root, bucket, iris, hub_server)
    second = seed(data_root, bucket, iris, hub_server, job=OTHER)
    # One Iris stand-in serves both runs.
    state = iris.state()
    from rlkeep_dev.example import iris_state

    state["jobs"].update(iris_state(first.run)["jobs"])
    iris.write_state(state)

    env = first.env()
    a = Pipeline(data_root, f"{JOB}/DONE", env=env, name="job-a")
    b = Pipeline(data_root, f"{OTHER}/DONE", env=env, name="job-b")
    started = [a, b]
    try:
        assert wait_for(lambda: holds_lock(data_root, JOB) or not a.running(), timeout=120)
        assert a.running(), a.output()[-3000:]
        again = Pipeline(data_root, f"{JOB}/DONE", env=env, name="job-a-again")
        started.append(again)
        refused = again.wait(timeout=300)
        status_a, status_b = a.wait(), b.wait()
    finally:
        for pipeline in started:
            if pipeline.running():
                pipeline.kill()
    figures_log.record("concurrency", runs=3, refused=int(refused != 0))

    assert refused != 0
    assert "cannot be locked" in again.output(), again.output()[-3000:]
    assert status_a == 0, a.output()[-4000:]
    assert status_b == 0, b.output()[-4000:]
    for scenario in (first, second):
        done = read_json(scenario.job_dir / "DONE")
        assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")], (scenario.record["job"], done["remaining_work"])
        assert output_problems(scenario.job_dir) == [] and leftovers(scenario.job_dir) == []
        assert publication_problems(scenario) == []
    # The job that was run twice at once ends exactly like a clean run (its registry row ids aside: the
    # other job registered in the same registry).
    done, expected = stable_done(first), copy.deepcopy(reference.done)  # the reference is shared by the session
    for record in (done, expected):
        for key in ("model_id", "trace_dataset_id"):
            record["registration"].pop(key)
    assert done == expected
    assert tar_digests(first.job_dir) == reference.tar_sha256
    assert {f["path"]: f["sha256"] for f in read_json(first.job_dir / "export.json")["files"]} == reference.export_files
    registrations = {read_json(s.job_dir / "register.json")["model"] for s in (first, second)}
    assert registrations == {f"demo/{JOB}", f"demo/{OTHER}"}
    # three invocations ended at different times, each refreshing every run's views: the last state stands
    assert_views_are_a_fresh_render(data_root, endpoint=env.get("HF_ENDPOINT"))
