"""Benchmark: parsing trainer logs into metric rows, rlkeep's chunked scanner vs a naive
line-by-line regex + ast.literal_eval parser, on generated logs of every serialization.

    .venv/bin/python tests/benchmarks/bench_metrics.py [--quick] [--size-mb N] [--keep DIR]

The logs are mostly noise (vLLM throughput lines, Ray and loguru lines, tracebacks, Harbor
progress lines that also start with "Step N:"), with one metric block of ~90 keys per
~64 KB, in five files: WANDB_MIRROR with ANSI + Ray prefixes, console `Step N:` dicts,
legacy python dicts, JSON lines, and console dicts behind Iris `job logs` prefixes.

Each parser runs in its own child process; the figures are measured there around the parse
only. Throughput and speedup use the child's CPU time (time.process_time), which a busy
shared machine disturbs far less than wall time; wall-clock MB/s is reported beside it.
Peak memory is resource.getrusage(RUSAGE_SELF).ru_maxrss at the end of each child (what
the parent would read as RUSAGE_CHILDREN). Last stdout line: one JSON object.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

E = "\x1b"
RAY = "(skyrl_entrypoint pid=2211) "
VLLM = "(AsyncVLLMInferenceEngine pid=3187) "
IRIS = "[17:05:45] task=/benjaminfeuer/rl-qwen3-swe-v3/0 | "
SERIALIZATION_FILES = ("wandb", "console", "pydict", "jsonl", "iris")
TARGET_SPEEDUP = 5.0


# --------------------------------------------------------------------------- generation

def metric_names() -> list[str]:
    names = ["reward/avg_raw_reward", "reward/avg_pass_at_8", "reward/mean_positive_reward",
             "policy/final_loss", "policy/policy_loss", "policy/policy_entropy", "policy/policy_lr",
             "policy/policy_kl", "policy/grad_norm", "generate/avg_num_tokens", "generate/min_num_tokens",
             "generate/max_num_tokens", "generate/std_num_tokens", "generate/avg_num_turns",
             "generate/num_timeout_trajectories", "generate/num_error_trajectories"]
    names += [f"timing/{name}" for name in ("step", "generate", "policy_train", "sync_weights", "save_checkpoints")]
    names += [f"async/staleness_{i}" for i in range(20)] + [f"vllm/engine_{i}_kv_cache_usage" for i in range(20)]
    names += [f"loss/component_{i}" for i in range(25)]
    return sorted(names)


def metrics_for(step: int, rng: random.Random) -> dict[str, float | int]:
    values: dict[str, float | int] = {name: round(rng.random() * 10, 6) for name in metric_names()}
    values["generate/num_timeout_trajectories"] = rng.randint(0, 4)
    values["trainer/global_step"] = step
    return dict(sorted(values.items()))


def loguru(message: str) -> str:
    return (f"{E}[32m2026-03-30 17:05:45.123{E}[0m | {E}[1mINFO    {E}[0m | {E}[36mskyrl.train.utils.tracking{E}[0m:"
            f"{E}[36mlog{E}[0m:{E}[36m97{E}[0m - {E}[1m{message}")


def pprint_dict(values: dict, stringify: bool) -> list[str]:
    items = [f"{key!r}: {(repr(f'{value:.4f}') if stringify and isinstance(value, float) else repr(value))}"
             for key, value in values.items()]
    return ["{" + items[0] + ","] + [" " + item + "," for item in items[1:-1]] + [" " + items[-1] + "}"]


def block(kind: str, step: int, rng: random.Random) -> str:
    values = metrics_for(step, rng)
    if kind == "wandb":
        return RAY + loguru(f"WANDB_MIRROR kind=train step={step} metrics={json.dumps(values)}") + f"{E}[0m\n"
    if kind == "jsonl":
        return json.dumps(values) + "\n"
    if kind == "pydict":
        return RAY + repr(values) + "\n"
    prefix = IRIS + RAY if kind == "iris" else RAY
    lines = [loguru(f"Step {step}: ")] + pprint_dict(values, stringify=True)
    lines[-1] += f"{E}[0m"
    return "".join(prefix + line + "\n" for line in lines)


def noise(rng: random.Random, target: int, kind: str) -> str:
    prefix = IRIS if kind == "iris" else ""
    lines: list[str] = []
    size = 0
    while size < target:
        choice = rng.random()
        if choice < 0.6:
            line = (f"{VLLM}INFO 03-30 17:05:{rng.randint(10, 59)} [loggers.py:123] Engine 00{rng.randint(0, 7)}: "
                    f"Avg prompt throughput: {rng.random() * 9000:.1f} tokens/s, Avg generation throughput: "
                    f"{rng.random() * 900:.1f} tokens/s, Running: {rng.randint(0, 64)} reqs, Waiting: 0 reqs, "
                    f"GPU KV cache usage: {rng.random() * 100:.1f}%, Prefix cache hit rate: {rng.random() * 100:.1f}%")
        elif choice < 0.8:
            line = (f"{RAY}{loguru('Finished trial codecontests-' + str(rng.randint(1, 9999)) + '__Xk3pQ9a in ')}"
                    f"{rng.random() * 900:.1f}s{E}[0m")
        elif choice < 0.9:
            line = (f"(raylet) [2026-03-30 17:05:45,{rng.randint(100, 999)} I 2211 2211] (raylet) "
                    f"worker_pool.cc:512: Started worker process with pid {rng.randint(1000, 99999)}")
        elif choice < 0.97:
            line = "\n".join(RAY + part for part in (
                "Traceback (most recent call last):",
                '  File "/app/skyrl_train/generators/harbor.py", line 212, in run_trial',
                "    result = await trial.run()",
                '  File "/app/harbor/trial/trial.py", line 301, in run',
                "    raise AgentTimeoutError(msg)",
                "harbor.trial.errors.AgentTimeoutError: Agent execution timed out after 1200.0 seconds"))
        else:
            line = (f"{RAY}{loguru('Step ' + str(rng.randint(1, 200)) + ': Batch generation complete: 62/64 successful, 2 failed instances, 1 masked')}"
                    f"{E}[0m")
        lines.append(prefix + line.replace("\n", "\n" + prefix))
        size += len(lines[-1]) + 1
    return "\n".join(lines) + "\n"


def generate(directory: Path, total_bytes: int, seed: int = 7) -> list[Path]:
    """Five logs of total_bytes together. Noise templates are generated once per file and
    reused between blocks (the parsers cannot exploit the repetition)."""
    rng = random.Random(seed)
    per_file = total_bytes // len(SERIALIZATION_FILES)
    paths = []
    for kind in SERIALIZATION_FILES:
        templates = [noise(rng, 64 << 10, kind) for _ in range(8)]
        path = directory / f"{kind}.out"
        written, step = 0, 0
        with open(path, "w") as handle:
            while written < per_file:
                step += 1
                piece = templates[step % len(templates)] + block(kind, step, rng)
                handle.write(piece)
                written += len(piece)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- the baseline

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIXES = re.compile(r"^(?:\[\d\d:\d\d:\d\d\] \S+(?: \S+)* \| )?(?:\([^)]*\) )?")
_WANDB = re.compile(r"WANDB_MIRROR\s+kind=(?P<kind>\S+)\s+step=(?P<step>\d+)\s+metrics=(?P<json>.*)$")
_HEADER = re.compile(r"(?:^|\s)Step (\d+):\s*$")


def baseline_parse(path: Path) -> int:
    """Naive: every line through the ANSI and prefix regexes, then per-format regexes; dict
    blocks joined and given to ast.literal_eval."""
    rows = 0
    collecting: list[str] | None = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            line = _PREFIXES.sub("", _ANSI.sub("", raw.rstrip("\n")))
            if collecting is not None:
                collecting.append(line)
                if line.rstrip().endswith("}"):
                    value = ast.literal_eval("\n".join(collecting))
                    rows += isinstance(value, dict)
                    collecting = None
                continue
            match = _WANDB.search(line)
            if match:
                if match.group("kind") == "train":
                    json.loads(match.group("json"))
                    rows += 1
                continue
            if _HEADER.search(line):
                collecting = []
                continue
            if line.startswith("{'async/"):
                if line.rstrip().endswith("}"):
                    rows += isinstance(ast.literal_eval(line), dict)
                else:
                    collecting = [line]
                continue
            if line.startswith('{"'):
                value = json.loads(line)
                rows += isinstance(value, dict) and "trainer/global_step" in value
    return rows


def target_parse(path: Path) -> int:
    from rlkeep.metrics import parse_log_file

    return len(parse_log_file(path).rows)


# --------------------------------------------------------------------------- running

def child(which: str, paths: list[str]) -> None:
    parse = target_parse if which == "target" else baseline_parse
    if which == "target":
        import rlkeep.metrics  # noqa: F401  (import time is not parse time)
    start, start_cpu = time.perf_counter(), time.process_time()
    rows = sum(parse(Path(path)) for path in paths)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rows": rows, "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "peak_rss_mb": round(peak_kb / 1024, 1)}))


def run_child(which: str, paths: list[Path]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", which, *map(str, paths)],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~20 MB instead of 500 MB")
    parser.add_argument("--size-mb", type=int, help="total size of the generated logs")
    parser.add_argument("--keep", help="generate into this directory and keep it")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return
    size_mb = args.size_mb or (20 if args.quick else 500)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as scratch:
        directory = Path(args.keep or scratch)
        directory.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        paths = generate(directory, size_mb << 20)
        total = sum(os.path.getsize(path) for path in paths)
        print(f"generated {total / 2**20:.0f} MB in {len(paths)} logs ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        target = run_child("target", paths)
        baseline = run_child("baseline", paths)
    megabytes = total / 2**20
    if target["rows"] != baseline["rows"]:
        raise SystemExit(f"row counts differ: target {target['rows']} vs baseline {baseline['rows']}")
    result = {
        "bench": "metrics",
        "input_mb": round(megabytes, 1),
        "metric_rows": target["rows"],
        "mb_per_s": round(megabytes / target["cpu_seconds"], 1),
        "baseline_mb_per_s": round(megabytes / baseline["cpu_seconds"], 1),
        "speedup": round(baseline["cpu_seconds"] / target["cpu_seconds"], 2),
        "wall_mb_per_s": round(megabytes / target["seconds"], 1),
        "baseline_wall_mb_per_s": round(megabytes / baseline["seconds"], 1),
        "peak_rss_mb": target["peak_rss_mb"],
        "baseline_peak_rss_mb": baseline["peak_rss_mb"],
        "peak_memory_method": "child process getrusage(RUSAGE_SELF).ru_maxrss",
        "target_speedup": TARGET_SPEEDUP,
    }
    result["target_met"] = result["speedup"] >= TARGET_SPEEDUP
    print(json.dumps(result))


if __name__ == "__main__":
    main()
