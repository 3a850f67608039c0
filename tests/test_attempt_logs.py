"""Every log an attempt left is read for what it carries (issue 27): vLLM's own log, SkyRL's
SKYRL_LOG_FILE and Ray worker outputs in logs.tar, beside the trainer's stdout."""
from __future__ import annotations

import csv
import io
import tarfile
from pathlib import Path

from rlkeep import attempt_logs
from rlkeep.generation_stats import render, scan_logs_tar

STAT = ("INFO 03-30 17:{minute:02d}:01 [loggers.py:123] Engine 000: Avg prompt throughput: {prompt}.0 tokens/s, "
        "Avg generation throughput: 10.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 50.0%, "
        "Prefix cache hit rate: 20.0%")
ACTOR = "(AsyncVLLMInferenceEngine pid={pid}, ip=10.0.0.1) "
TRAINER = ("(skyrl_entrypoint pid=5) 2026-03-30 17:00:00.000 | INFO | trainer:_log_metrics_stdout:1951 - "
           'WANDB_MIRROR kind=train step=1 metrics={"trainer/global_step": 1}\n')
WORKER = "ray/{slug}/session_2026-03-30_17-01-55_003373_2150/logs/worker-9a97f1-01000000-{pid}.out"


def write_tar(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def vllm_rows(rendered: dict[str, bytes]) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(rendered["vllm.csv"].decode())))


def test_stats_only_in_vllm_log_give_vllm_csv_rows_naming_the_file(tmp_path: Path) -> None:
    tar = write_tar(tmp_path / "logs.tar", {
        "attempts/a1/trainer.log": TRAINER,
        "store/logs/a1.out": TRAINER + STAT.format(minute=9, prompt=999) + "\n",  # the same stdout, not read twice
        "store/vllm/a1.log": "\n".join(STAT.format(minute=m, prompt=100 + m) for m in (1, 2, 3)) + "\n",
    })
    stats = scan_logs_tar(tar, ["a1"])
    rows = vllm_rows(render(stats))
    assert [(r["attempt"], r["time"], r["prompt_tokens_per_s"], r["source"]) for r in rows] == [
        ("a1", f"03-30 17:0{m}:01", f"{100 + m}", "store/vllm/a1.log") for m in (1, 2, 3)]
    report = render(stats)["generation.md"].decode()
    assert "| a1 | store/vllm/a1.log | vLLM log |" in report and "| a1 | attempts/a1/trainer.log | trainer stdout |" in report
    assert "| store/logs/a1.out | the store's copy of attempt a1's trainer stdout" in report


def test_skyrl_log_file_and_ray_worker_outputs_are_read_once(tmp_path: Path) -> None:
    forwarded = STAT.format(minute=5, prompt=50)
    tar = write_tar(tmp_path / "logs.tar", {
        "attempts/a1/trainer.log": TRAINER + ACTOR.format(pid=3187) + forwarded + "\n",
        "attempts/a2/trainer.log": TRAINER,
        # Ray forwarded this worker's lines to the driver: already in a1's trainer stdout
        "store/" + WORKER.format(slug="a1", pid=3187): forwarded + "\n",
        "store/" + WORKER.format(slug="a1", pid=3188): STAT.format(minute=5, prompt=7) + "\n",
        "store/skyrl-logs/a2/infra-260330_170153.log": STAT.format(minute=6, prompt=60) + "\n"
        "Batch generation complete: 30/32 successful, 2 failed instances, 1 masked\n",
        "store/ray/a1/session_x/logs/raylet.out": STAT.format(minute=7, prompt=70) + "\n",
        "store/vllm.log": STAT.format(minute=8, prompt=80) + "\n",  # names no attempt of a two-attempt chain
    })
    stats = scan_logs_tar(tar, ["a1", "a2"])
    rendered = render(stats)
    rows = vllm_rows(rendered)
    assert [(r["attempt"], r["time"], r["engines"], r["prompt_tokens_per_s"]) for r in rows] == [
        ("a1", "03-30 17:05:01", "2", "57"), ("a2", "03-30 17:06:01", "1", "60")]
    assert rows[0]["source"] == "attempts/a1/trainer.log store/" + WORKER.format(slug="a1", pid=3188)
    assert rows[1]["source"] == "store/skyrl-logs/a2/infra-260330_170153.log"
    batches = list(csv.DictReader(io.StringIO(rendered["batch_errors.csv"].decode())))
    assert [(b["attempt"], b["step"], b["source"], b["failed"]) for b in batches] == [
        ("a2", "", "store/skyrl-logs/a2/infra-260330_170153.log", "2")]
    why = dict(stats.not_read)
    assert "whose lines Ray forwarded to the trainer stdout" in why["store/" + WORKER.format(slug="a1", pid=3187)]
    assert why["store/ray/a1/session_x/logs/raylet.out"] == "not a vLLM, SkyRL infrastructure or Ray worker log"
    assert "names exactly one attempt" in why["store/vllm.log"]
    report = rendered["generation.md"].decode()
    assert "## Log files not read" in report and "| store/vllm.log | vLLM log, but no folder" in report


def test_plan_attributes_by_exact_folder_or_stem() -> None:
    plan = attempt_logs.plan_logs(["store/vllm/rl-demo-r1.log", "store/vllm/rl-demo.log", "store/x/rl-demo-r1/vllm.log",
                                   "attempts/rl-demo/trainer.log"], ["rl-demo", "rl-demo-r1"])
    assert [(f.attempt, f.member, f.kind) for f in plan.read] == [
        ("rl-demo", "attempts/rl-demo/trainer.log", attempt_logs.TRAINER),
        ("rl-demo", "store/vllm/rl-demo.log", attempt_logs.VLLM),
        ("rl-demo-r1", "store/vllm/rl-demo-r1.log", attempt_logs.VLLM),
        ("rl-demo-r1", "store/x/rl-demo-r1/vllm.log", attempt_logs.VLLM)]
    single = attempt_logs.plan_logs(["store/vllm.log"], ["only"])
    assert [(f.attempt, f.member) for f in single.read] == [("only", "store/vllm.log")]
