"""Regenerate the corpus in this folder by running the upstream logging code itself (see SOURCES.md).

Not part of the test suite: run by hand when an upstream format changes, with the two repositories
fetched as bare git directories and loguru importable (it is not a dependency of rlkeep):

    python tests/data/upstream/make_corpus.py SKYRL_GIT SKYRL_COMMIT MARIN_GIT MARIN_COMMIT

The functions are read from the given commits with `git show`, cut out of their file with `ast`
and executed as they are (compiled at their original line numbers, so loguru prints the upstream
`function:line`); nothing of their code is kept in this repository. Ray's driver prefix and
de-duplication suffix and vLLM's stat line are format strings quoted in SOURCES.md (the libraries
are too large to run here) and applied by `ray_prefixed` and `vllm_lines` below.
"""
from __future__ import annotations

import ast
import io
import json
import logging
import os
import pprint
import subprocess
import sys
import typing
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).parent

# The values the logs carry (the ground truth the tests compare against).
STEPS = {
    1: {"reward/avg_raw_reward": 0.125, "policy/policy_loss": -0.0312, "policy/grad_norm": 0.4375,
        "generate/avg_num_tokens": 5120.0, "timing/step": 612.5, "trainer/epoch": 0},
    2: {"reward/avg_raw_reward": 0.1875, "policy/policy_loss": 0.0078125, "policy/grad_norm": 0.375,
        "generate/avg_num_tokens": 5402.25, "timing/step": 598.0, "trainer/epoch": 0},
    3: {"reward/avg_raw_reward": 0.25, "policy/policy_loss": -0.015625, "policy/grad_norm": 0.5,
        "generate/avg_num_tokens": 5630.5, "timing/step": 640.75, "trainer/epoch": 0},
}
VLLM_REPORTS = [  # (time, engine, prompt tok/s, generation tok/s, running, waiting, kv %, prefix hit %)
    ("03-30 17:05:40", 0, 1200.0, 310.5, 12, 3, 41.2, 55.0),
    ("03-30 17:05:40", 1, 800.0, 290.0, 10, 0, 38.8, 61.5),
    ("03-30 17:05:50", 0, 950.4, 305.1, 11, 1, 44.0, 57.25),
]


def git_show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def load_definition(source: str, filename: str, qualname: str, namespace: dict) -> object:
    """Execute one top-level def/class (or Class.method) of an upstream file at its own line numbers."""
    owner, _, member = qualname.partition(".")
    tree = ast.parse(source)
    node = next(n for n in tree.body if getattr(n, "name", None) == owner)
    if member:
        node = next(n for n in node.body if getattr(n, "name", None) == member)
    node.decorator_list = []
    module = ast.Module(body=[node], type_ignores=[])
    exec(compile(module, filename, "exec"), namespace)
    return namespace[node.name]


def upstream_namespace(module_name: str) -> dict:
    from loguru import logger

    return {"__name__": module_name, "logger": logger, "pprint": pprint, "json": json, "os": os, "sys": sys,
            "logging": logging, **{name: getattr(typing, name) for name in ("Any", "Dict", "List", "Optional")}}


def capture_loguru(configure, emit) -> list[str]:
    """Lines loguru writes to stderr under the upstream configuration."""
    from loguru import logger

    buffer = io.StringIO()
    saved, sys.stderr = sys.stderr, buffer
    try:
        configure()
        emit()
        logger.complete()
        logger.remove()
    finally:
        sys.stderr = saved
    return buffer.getvalue().splitlines()


def ray_prefixed(lines: list[str], name: str, pid: int, ip: str | None) -> list[str]:
    """Ray's driver print of a worker's line (SOURCES.md, Ray worker.py print_worker_logs)."""
    dim, cyan, reset = "\x1b[2m", "\x1b[36m", "\x1b[0m"
    where = f"{name} pid={pid}" + (f", ip={ip}" if ip else "")
    return [f"{dim}{cyan}({where}){reset} {line}" for line in lines]


def ray_repeated(line: str, count: int, first: bool) -> str:
    """Ray's de-duplicated line (SOURCES.md, ray_logging DedupState.formatted and _warn_once)."""
    green, reset = "\x1b[32m", "\x1b[0m"
    warning = (" (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see "
               "https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication "
               "for more options.)") if first else ""
    return line + f"{green} [repeated {count}x across cluster]{warning}{reset}"


def vllm_lines() -> list[str]:
    """vLLM's V1 stat line through vLLM's own log format (SOURCES.md, vllm/logger.py and loggers.py)."""
    formatter = logging.Formatter("%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
                                  "%m-%d %H:%M:%S")
    out = []
    for moment, engine, *numbers in VLLM_REPORTS:
        record = logging.LogRecord("vllm.v1.metrics.loggers", logging.INFO, "loggers.py", 123,
                                   "Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: "
                                   "%.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
                                   "Prefix cache hit rate: %.1f%%", (engine, *numbers), None)
        record.created = datetime.strptime(f"2026-{moment}", "%Y-%m-%d %H:%M:%S").timestamp()
        out.append(formatter.format(record))
    return out


def main(skyrl_git: str, skyrl_commit: str, marin_git: str, marin_commit: str) -> None:
    skyrl_utils = git_show(skyrl_git, skyrl_commit, "skyrl/train/utils/utils.py")
    tracking = git_show(skyrl_git, skyrl_commit, "skyrl/train/utils/tracking.py")
    trainer = git_show(marin_git, marin_commit, "skyrl-train/skyrl_train/trainer.py")

    console_ns = upstream_namespace("skyrl.train.utils.tracking")
    configure = load_definition(skyrl_utils, "skyrl/train/utils/utils.py", "configure_ray_worker_logging",
                                upstream_namespace("skyrl.train.utils.utils"))
    console = load_definition(tracking, "skyrl/train/utils/tracking.py", "ConsoleLogger", console_ns)
    console_lines = capture_loguru(configure, lambda: [console().log(values, step) for step, values in STEPS.items()])

    mirror_ns = upstream_namespace("skyrl_train.trainer")
    mirror = load_definition(trainer, "skyrl-train/skyrl_train/trainer.py", "RayPPOTrainer._log_metrics_stdout",
                             mirror_ns)
    mirror_lines = capture_loguru(configure, lambda: [mirror(None, values, step) for step, values in STEPS.items()])

    driver = ray_prefixed(console_lines, "skyrl_entrypoint", 2211, None)
    (HERE / "skyrl_console.worker.out").write_text("\n".join(console_lines) + "\n")
    (HERE / "skyrl_console.driver.log").write_text("\n".join(driver) + "\n")
    mirrored = ray_prefixed(mirror_lines, "skyrl_entrypoint", 2211, None)
    mirrored.insert(1, ray_prefixed([ray_repeated("INFO weight sync done", 3, True)], "FSDPPolicyWorker", 4418,
                                    "10.20.3.15")[0])
    (HERE / "marin_wandb_mirror.driver.log").write_text("\n".join(mirrored) + "\n")
    (HERE / "vllm_v1.vllm.log").write_text("\n".join(vllm_lines()) + "\n")
    expected = {"steps": {str(k): v for k, v in STEPS.items()},
                "vllm": [dict(zip(("time", "engine", "prompt", "generation", "running", "waiting", "kv", "prefix"), r))
                         for r in VLLM_REPORTS]}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
