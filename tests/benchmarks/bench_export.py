"""Benchmark: consolidating a sharded safetensors checkpoint vs `cp` of the same bytes.

A checkpoint of 4 safetensors shards (2 GB; --quick: 200 MB) is consolidated into a flat folder
of 3 shards, so every byte is really rewritten under new headers. Side by side in one run, on
the same disk, trials interleaved: `cp` of the 4 input shards, and `rlkeep.export.consolidate`
(which also verifies, sha256-hashes every output file and fsyncs it before the atomic rename).
Because consolidate makes its output durable, `cp` is also timed followed by fsync of the copies
(the like-for-like baseline); both baselines are reported.

Peak memory: the consolidation runs in a child process; its ru_maxrss comes from os.wait4.
Target: throughput >= 70% of the baseline, peak RSS < 2 x largest tensor + 200 MB.
The last stdout line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlkeep.export import encode_safetensors_header
from rlkeep.jsonio import write_json

MB = 10**6
CHILD = """
import json, resource, sys, time
from pathlib import Path
from rlkeep.export import consolidate
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
cpu_started, started = cpu(), time.perf_counter()
report = consolidate(Path(sys.argv[1]), Path(sys.argv[2]), max_shard_bytes=int(sys.argv[3]))
elapsed, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu_seconds, "weights": report["output"]["weights"]}))
"""


def tensor_sizes(total_bytes: int) -> list[int]:
    """An LLM-like mix: embedding and lm_head of 1/8 each, 48 block tensors sharing the rest."""
    big = (total_bytes // 8) // 2 * 2
    blocks = 48
    block = ((total_bytes - 2 * big) // blocks) // 2 * 2
    return [big] + [block] * blocks + [big]


def write_source(directory: Path, total_bytes: int, shards: int = 4) -> tuple[int, int]:
    """A sharded HF export of random BF16 tensors; returns (bytes of the shard files, largest tensor)."""
    import numpy as np

    rng = np.random.default_rng(0)
    sizes = tensor_sizes(total_bytes)
    names = [f"model.layers.{i:02d}.weight" for i in range(len(sizes))]
    per_shard = -(-len(sizes) // shards)
    weight_map: dict[str, str] = {}
    file_bytes = 0
    for number in range(1, shards + 1):
        part = list(range((number - 1) * per_shard, min(number * per_shard, len(sizes))))
        name = f"model-{number:05d}-of-{shards:05d}.safetensors"
        header = encode_safetensors_header([(names[i], "BF16", [sizes[i] // 2], sizes[i]) for i in part])
        with open(directory / name, "wb") as handle:
            handle.write(header)
            for i in part:
                left = sizes[i]
                while left:
                    chunk = min(left, 64 << 20)
                    handle.write(rng.bytes(chunk))
                    left -= chunk
        weight_map.update({names[i]: name for i in part})
        file_bytes += (directory / name).stat().st_size
    write_json(directory / "model.safetensors.index.json",
               {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map})
    write_json(directory / "config.json", {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"})
    write_json(directory / "tokenizer.json", {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})
    write_json(directory / "tokenizer_config.json", {"tokenizer_class": "Qwen2Tokenizer"})
    return file_bytes, max(sizes)


def wait_child(child: subprocess.Popen) -> os.struct_rusage:
    """Wait for one child and return its own resource usage (peak RSS, CPU seconds)."""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{child.args[0]} failed with exit status {child.returncode}")
    return usage


def time_cp(sources: list[Path], target: Path, *, fsync: bool) -> tuple[float, float]:
    """Seconds of `cp` (then fsync of the copies when asked) and cp's CPU seconds."""
    target.mkdir()
    started = time.perf_counter()
    usage = wait_child(subprocess.Popen(["cp", *map(str, sources), str(target)]))
    if fsync:
        for path in target.iterdir():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def time_consolidate(source: Path, target: Path, max_shard_bytes: int) -> tuple[float, int, float, dict]:
    """Run consolidate in a child; returns (seconds inside consolidate, child peak RSS bytes,
    CPU seconds inside consolidate (all threads), result)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(source), str(target), str(max_shard_bytes)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    usage = wait_child(child)
    result = json.loads(output.strip().splitlines()[-1])
    return result["seconds"], usage.ru_maxrss * 1024, result["cpu_seconds"], result


def settle() -> None:
    """Flush earlier trials' dirty pages so one trial's writeback does not slow the next."""
    os.sync()
    time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 MB instead of 2 GB")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory on the disk to measure")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--write-source", nargs=2, metavar=("DIR", "BYTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_source:
        print(json.dumps(write_source(Path(args.write_source[0]), int(args.write_source[1]))))
        return
    total = 200 * MB if args.quick else 2000 * MB
    trials = args.trials or (2 if args.quick else 3)

    scratch = Path(tempfile.mkdtemp(prefix="bench-export-", dir=args.dir))
    try:
        source = scratch / "source"
        source.mkdir()
        # Generated in a child: the parent stays small, since a forked child's ru_maxrss starts
        # from the parent's resident size.
        made = subprocess.run([sys.executable, __file__, "--write-source", str(source), str(total)],
                              check=True, capture_output=True, text=True)
        source_bytes, largest = json.loads(made.stdout)
        shards = sorted(source.glob("*.safetensors"))
        max_shard_bytes = -(-total // 3) + total // 50  # 4 shards in -> 3 shards out
        cp_s, cp_fsync_s, consolidate_s, rss, cpu, cp_cpu = [], [], [], [], [], []
        result: dict = {}
        load_before = os.getloadavg()[0]
        for trial in range(trials):
            settle()
            seconds, cpu_seconds = time_cp(shards, scratch / f"cp-{trial}", fsync=False)
            cp_s.append(seconds)
            cp_cpu.append(cpu_seconds)
            settle()
            cp_fsync_s.append(time_cp(shards, scratch / f"cpf-{trial}", fsync=True)[0])
            settle()
            seconds, peak, cpu_seconds, result = time_consolidate(source, scratch / f"flat-{trial}", max_shard_bytes)
            consolidate_s.append(seconds)
            rss.append(peak)
            cpu.append(cpu_seconds)
            for name in (f"cp-{trial}", f"cpf-{trial}", f"flat-{trial}"):
                shutil.rmtree(scratch / name)
        rate = source_bytes / MB / statistics.median(consolidate_s)
        cp_rate = source_bytes / MB / statistics.median(cp_s)
        cp_fsync_rate = source_bytes / MB / statistics.median(cp_fsync_s)
        peak_rss = max(rss)
        rss_limit = 2 * largest + 200 * MB
        figures = {
            "bench": "export",
            "bytes": source_bytes,
            "input_shards": len(shards),
            "output_shards": len(result.get("weights", [])),
            "trials": trials,
            "mb_per_s": round(rate, 1),
            "baseline_cp_fsync_mb_per_s": round(cp_fsync_rate, 1),
            "baseline_cp_mb_per_s": round(cp_rate, 1),
            "ratio_vs_cp_fsync": round(rate / cp_fsync_rate, 3),
            "ratio_vs_cp": round(rate / cp_rate, 3),
            "seconds": [round(s, 3) for s in consolidate_s],
            "cp_seconds": [round(s, 3) for s in cp_s],
            "cp_fsync_seconds": [round(s, 3) for s in cp_fsync_s],
            "cpu_s_per_gb": round(statistics.median(cpu) / (source_bytes / 10**9), 3),
            "cp_cpu_s_per_gb": round(statistics.median(cp_cpu) / (source_bytes / 10**9), 3),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "cpu_count": os.cpu_count(),
            "largest_tensor_mb": round(largest / MB, 1),
            "peak_rss_mb": round(peak_rss / MB, 1),
            "rss_limit_mb": round(rss_limit / MB, 1),
            "peak_rss_method": "os.wait4 ru_maxrss of the consolidating child process",
        }
        figures["target"] = ("mb_per_s >= 0.7 x baseline_cp_fsync_mb_per_s (same durability) and "
                             "peak_rss_mb < rss_limit_mb")
        figures["target_met"] = rate >= 0.7 * cp_fsync_rate and peak_rss < rss_limit
        print(json.dumps(figures))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
