"""Advice from the real cause (issue 27): with metric_surface blocked, every step that has not run
is told what holds it back (metric_surface, its reason, the command that continues it), never a
remedy of its own; through the real pipeline, S3 server, Iris stand-in and Hub-compatible server.
"""
from __future__ import annotations

import json
from pathlib import Path

from rlkeep.storage import open_store
from tests.conftest import run_snakemake, seed_example
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"
# What a trainer prints before its first step: readable, and no metric line anywhere.
NO_METRICS = ["starting trainer", "loading model Qwen/Qwen3-0.6B", "initialising the inference engines"]


def test_every_remaining_step_of_a_run_blocked_at_metric_surface_names_it(data_root: Path, bucket: str, iris,
                                                                           hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    store = open_store(record["store"])
    slugs = [job_id.rsplit("/", 1)[1] for job_id in run.chain]
    for slug in slugs:  # the store's copy of each attempt's log (the CLI's is not provably whole)
        store.put_bytes(f"logs/{slug}.out", "".join(f"{line}\n" for line in NO_METRICS).encode())

    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode != 0
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert status["blocked"] == ["metric_surface"], status["steps"]
    reason = status["steps"]["metric_surface"]["reason"]
    assert reason.startswith("no attempt of the chain logged metrics"), reason
    surface_command = status["steps"]["metric_surface"] and next(
        item["command"] for item in status["remaining_work"] if item["step"] == "metric_surface")
    assert surface_command.endswith(f"{JOB}/metrics/metrics.csv --forcerun sync_logs")

    held = [item for item in status["remaining_work"] if item["step"] != "metric_surface"]
    assert {item["step"] for item in held} >= {"select_checkpoint", "export_model", "publish_model",
                                               "link_model_card", "register", "reclaim"}
    for item in held:
        assert item["status"] == "pending" and item["blocked_by"] == "metric_surface", item
        assert f"metric_surface is blocked: {reason}" in item["reason"], item
        assert item["remaining"].startswith("metric_surface is blocked (no attempt of the chain logged metrics"), item
        assert item["command"] == surface_command, item
        assert "checkpoint.rule" not in item["remaining"] and "consolidate" not in item["remaining"], item
    # the campaign page reads the same
    page = (data_root / "campaign" / f"{JOB}.html").read_text()
    assert "metric_surface is blocked" in page

    # Followed: the operator puts the trainer logs back where the run keeps them and runs the command
    # every held step names; it goes on, and then so does `continue`.
    for slug in slugs:
        store.put_file(f"logs/{slug}.out", run.root / "logs" / f"{slug}.out")
    env = env_for(hub_server)
    fixed = run_snakemake(data_root, *after_profile(surface_command), env=env)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert (data_root / JOB / "metrics" / "metrics.csv").is_file()
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert status["blocked"] == [] and "blocked_by" not in status["steps"]["select_checkpoint"]
    assert status["steps"]["select_checkpoint"]["reason"] == "has not run yet"
    finished = run_snakemake(data_root, *after_profile(status["continue"]), env=env)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert (data_root / JOB / "DONE").is_file()


def after_profile(command: str) -> list[str]:
    """The words of a printed command after `--profile P` (run_snakemake gives its own Snakefile and profile)."""
    words = command.split()
    return words[words.index("--profile") + 2:]
