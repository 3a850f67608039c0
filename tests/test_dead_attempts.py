"""Real runs are messy (issue 16): dead attempts are data, and a failed trace sync blocks only the
trace side, through the real Snakemake pipeline, S3 server and Iris stand-in."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from rlkeep.checkpoints import select_checkpoint
from rlkeep.metrics import build_surface, read_metrics_csv
from rlkeep.storage import open_store
from tests.conftest import run_snakemake, seed_example
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"


def test_a_chain_with_two_dead_attempts_reaches_done(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, dead_attempts=True,
                               record_overrides=publish_overrides(bucket, data_root))
    assert run.dead_attempts == {"rl-demo-r1": "traceback", "rl-demo-r2": "empty"}
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode == 0, result.stderr[-4000:]
    job = data_root / JOB

    chain = json.loads((job / "chain.json").read_text())
    assert [(a["slug"], a["state"]) for a in chain["attempts"]] == [
        ("rl-demo", "failed"), ("rl-demo-r1", "failed"), ("rl-demo-r2", "failed"), ("rl-demo-r3", "pending")]

    with tarfile.open(job / "sync/logs.tar") as tar:  # preserved as they are
        assert tar.getmember("attempts/rl-demo-r2/trainer.log").size == 0
        traceback = tar.extractfile("attempts/rl-demo-r1/trainer.log").read().decode()
    assert "Traceback (most recent call last):" in traceback and "uncorrectable ECC error" in traceback
    manifest = {a["attempt"]: a for a in json.loads((job / "sync/logs.manifest.json").read_text())["attempts"]}
    assert (manifest["rl-demo-r2"]["bytes"], manifest["rl-demo-r2"]["lines"], manifest["rl-demo-r2"]["state"]) == (
        0, 0, "failed")
    assert manifest["rl-demo-r1"]["lines"] == len(traceback.splitlines()) and manifest["rl-demo-r1"]["state"] == "failed"

    # the surface is the two training attempts', and the selection is the one they give
    rows = read_metrics_csv(job / "metrics/metrics.csv")
    assert {row["attempt"] for row in rows} == {"rl-demo", "rl-demo-r3"}
    store = open_store(record["store"])
    training = build_surface([(slug, f"{slug}.out", store.read_bytes(f"logs/{slug}.out").decode())
                              for slug in ("rl-demo", "rl-demo-r3")])
    assert [(r["global_step"], r["attempt"]) for r in rows] == [(r["global_step"], r["attempt"]) for r in training.rows]
    candidates = json.loads((job / "checkpoint/candidates.json").read_text())["candidates"]
    expected = select_checkpoint(candidates, record["checkpoint"]["rule"], training.rows, None)["step"]
    selected = json.loads((job / "checkpoint/selected.json").read_text())
    assert selected["step"] == expected and expected in run.complete_ckpt_steps

    named = [("rl-demo-r1", "no_metric_blocks", "failed"), ("rl-demo-r2", "empty", "failed")]
    done = json.loads((job / "DONE").read_text())
    assert [(a["attempt"], a["reason"], a["state"]) for a in done["attempts_without_metrics"]] == named
    assert done["checkpoint"]["step"] == expected
    assert all(status in {"completed", "not_applicable"} for status in done["steps"].values())
    assert set(done["artifacts"].values()) == {"present"} and done["artifact_reasons"] == {}
    report = (job / "REPORT.md").read_text()
    assert "## Attempts without metrics" in report
    assert "| rl-demo-r1 | no_metric_blocks | failed |" in report and "| rl-demo-r2 | empty | failed | 0 | 0 |" in report
    metric_report = (job / "metrics/report.md").read_text()
    assert "| rl-demo-r2 | empty | failed | 0 | 0 |" in metric_report
    status = json.loads((job / "STATUS.json").read_text())
    assert status["done"] and [(a["attempt"], a["reason"], a["state"]) for a in status["attempts_without_metrics"]] == named


def test_an_empty_trace_prefix_blocks_only_the_trace_side(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    store = open_store(record["store"])
    store.delete([info.key for info in store.list("trace_jobs/")])
    assert not list(store.list("trace_jobs/"))
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))  # the profile keeps going
    assert result.returncode != 0
    job = data_root / JOB

    status = json.loads((job / "STATUS.json").read_text())
    assert "sync_traces" in status["blocked"]
    assert "no trace objects under this prefix" in status["steps"]["sync_traces"]["reason"]
    for independent in ("sync_logs", "list_checkpoints", "metric_surface", "select_checkpoint", "export_model"):
        assert independent in status["completed"], independent
    assert (job / "export.json").is_file() and any((job / "model").glob("*.safetensors"))
    assert not (job / "metrics/trials.csv").exists() and (job / "metrics/report.md").is_file()
    assert not (job / "DONE").exists() and not status["done"]

    # the completion record of a blocked run: everything DONE would state, with what is missing
    selected = json.loads((job / "checkpoint/selected.json").read_text())
    assert status["checkpoint"]["step"] == selected["step"] and status["candidates"] == run.complete_ckpt_steps
    assert status["export"]["format"] and status["export"]["files"]
    assert status["destinations"]["model"] == f"demo/{JOB}" and status["destinations"]["traces"] == f"demo/{JOB}-traces"
    assert set(status["artifacts"]) == {"weights", "tokenizer_configuration", "training_logs", "training_traces_link"}
    assert status["artifacts"]["weights"] == status["artifacts"]["tokenizer_configuration"] == "present"
    assert status["artifacts"]["training_traces_link"] == "absent"
    assert status["artifact_reasons"]["training_traces_link"].startswith("sync_traces blocked: ")
    assert "no trace objects under this prefix" in status["artifact_reasons"]["training_traces_link"]
    assert set(status["artifact_reasons"]) == {k for k, v in status["artifacts"].items() if v == "absent"}
    assert status["verification"]["traces"] != "completed" and status["verification"]["archive"] != "completed"
    assert status["reclaimed"]["keys"] == 0 and status["attempts_without_metrics"] == []
    blocked = {item["step"]: item for item in status["remaining_work"]}
    assert blocked["sync_traces"]["command"].endswith(f"--profile {Path(__file__).parent.parent / 'profiles/local'} "
                                                      f"{JOB}/sync/trace_jobs.manifest.json")
    assert status["continue"].endswith(f"{JOB}/DONE")

    # the command continues the blocked step once the prefix holds traces again
    for path in sorted((run.root / "trace_jobs").rglob("*")):
        if path.is_file():
            store.put_file(path.relative_to(run.root).as_posix(), path)
    command = blocked["sync_traces"]["command"].split()
    again = run_snakemake(data_root, *command[command.index("--profile") + 2:])
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((job / "sync/trace_jobs.manifest.json").read_text())["objects_synced"] > 0
