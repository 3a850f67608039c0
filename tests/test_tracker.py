"""The tracker URL: the record's, else one a trainer log printed (with its attempt and line), never invented."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from rlkeep.records import validate_record_data
from rlkeep.tracker import PrintedUrl, tracker_from_logs, tracker_of, tracker_urls_in_log

URL = "https://wandb.ai/laion-rl/rl-agentic/runs/mx58jqyn"


@pytest.mark.parametrize("line", [
    f"wandb: 🚀 View run at {URL}",
    f"wandb: 🚀 View run rl-qwen3-swe-v3 at: {URL}",
    f"(skyrl_entrypoint pid=2211) wandb: 🚀 View run at {URL}",
    f"wandb: 🚀 View run \x1b[33mrl-qwen3-swe-v3\x1b[0m at: \x1b[34m\x1b[4m{URL}\x1b[0m",
    f"wandb: View run at {URL}.",
])
def test_view_run_lines_in_every_shape_give_the_url(line: str) -> None:
    data = f"Installed 200 packages\n{line}\nStep 1: \n".encode()
    assert tracker_urls_in_log(data) == [PrintedUrl(URL, 2)]


@pytest.mark.parametrize("line", [
    "wandb: ⭐️ View project at https://wandb.ai/laion-rl/rl-agentic",  # a project, not the run
    f"see {URL} for the run",  # not what W&B prints
    "wandb: Syncing run rl-qwen3-swe-v3",  # a run name alone: no URL is built from it
    "wandb: 🚀 View run at wandb.ai/x/y/runs/z",  # not an http(s) URL
])
def test_anything_else_is_not_a_tracker_url(line: str) -> None:
    assert tracker_urls_in_log(f"{line}\n".encode()) == []


def test_the_first_attempt_that_printed_one_is_the_source_and_other_urls_are_named() -> None:
    other = "https://wandb.ai/laion-rl/rl-agentic/runs/zz99"
    logs = [("rl-demo", "attempts/rl-demo/trainer.log", b"Traceback (most recent call last):\n"),
            ("rl-demo-r1", "attempts/rl-demo-r1/trainer.log", f"x\nwandb: View run at {URL}\n".encode()),
            ("rl-demo-r2", "attempts/rl-demo-r2/trainer.log", f"wandb: View run at {URL}\nwandb: View run at {other}\n".encode())]
    url, source = tracker_from_logs(logs)
    assert url == URL
    assert source == {"from": "trainer log", "attempt": "rl-demo-r1", "log": "attempts/rl-demo-r1/trainer.log", "line": 2,
                      "other_urls": [{"url": other, "attempt": "rl-demo-r2", "log": "attempts/rl-demo-r2/trainer.log",
                                      "line": 2}]}
    assert tracker_from_logs(logs[:1]) == (None, None)


def record(tmp_path: Path, **extra):
    data = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"],
            "store": "s3://bucket/iris/rl-demo", "checkpoint": {"interval": 20}, **extra}
    return validate_record_data(data, tmp_path / "records" / "rl-demo.yaml")


def write_logs_tar(job_dir: Path, logs: dict[str, bytes]) -> None:
    (job_dir / "sync").mkdir(parents=True, exist_ok=True)
    with tarfile.open(job_dir / "sync" / "logs.tar", "w") as tar:
        for attempt, data in logs.items():
            info = tarfile.TarInfo(f"attempts/{attempt}/trainer.log")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_url_printed_by_the_example_trainer_is_reported_with_its_attempt_and_line(tmp_path: Path) -> None:
    from rlkeep_dev.example import write_example_run

    run = write_example_run(tmp_path / "example", job="rl-demo", user="demo", n_trials=12)
    printed = run.record(store_url="s3://bucket/iris/rl-demo", scheduler="none", cluster=None)["tracker_url"]
    logs = {slug: (run.root / "logs" / f"{slug}.out").read_bytes() for slug in ("rl-demo", "rl-demo-r1")}
    write_logs_tar(tmp_path / "rl-demo", logs)
    url, source = tracker_of(record(tmp_path), tmp_path / "rl-demo")
    assert url == printed
    line = logs["rl-demo"].split(b"\n")[source["line"] - 1]
    assert source["attempt"] == "rl-demo" and b"View run at " + printed.encode() in line
    assert source["log"] == "attempts/rl-demo/trainer.log" and source["logs"] == "sync/logs.tar"


def test_the_record_url_always_wins_and_nothing_is_invented(tmp_path: Path) -> None:
    job_dir = tmp_path / "rl-demo"
    write_logs_tar(job_dir, {"rl-demo": f"wandb: View run at {URL}\n".encode()})
    assert tracker_of(record(tmp_path, tracker_url="https://wandb.ai/t/p/runs/declared"), job_dir) == (
        "https://wandb.ai/t/p/runs/declared", "record")
    write_logs_tar(job_dir, {"rl-demo": b"wandb: Syncing run rl-demo\n", "rl-demo-r1": b""})
    assert tracker_of(record(tmp_path), job_dir) == (None, "not recorded, and no trainer log printed one")
    assert tracker_of(record(tmp_path), tmp_path / "elsewhere")[0] is None
