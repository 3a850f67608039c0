"""Benchmark: consolidating a sharded safetensors checkpoint vs `cp` of the same bytes.

A sharded HF checkpoint (4 safetensors shards under `policy/`-style nesting, 2 GB; --quick:
200 MB) is consolidated into a flat folder two ways, side by side in one run on the same disk,
trials interleaved with `cp` of the 4 input shards and `cp` followed by fsync of the copies:

- as-is (the issue's scenario, default max_shard_bytes): every shard is already in final form,
  so it is hard-linked, then sha256-hashed, fsynced and verified like any output;
- resharded (max_shard_bytes a fifth of the model, below every input shard's size): every byte
  is rewritten under new headers with copy_file_range while a trailing reader hashes it. On a 2-core machine that
  path cannot reach 70% of plain `cp`: hashing every output byte alone costs bytes / sha256 rate
  CPU-seconds. `resharded_max_ratio_vs_cp` is that ceiling, from the measured sha256 rate and
  cp's own CPU time: cp_s / max(cp_s, (sha256 CPU-s + cp CPU-s) / cores).

Peak memory: the consolidation runs in a child process; its ru_maxrss comes from os.wait4.
Target (as-is): throughput >= 70% of plain cp, peak RSS < 2 x largest tensor + 200 MB.
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

from rlkeep.export import DEFAULT_MAX_SHARD_BYTES, encode_safetensors_header
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


def sha256_mb_per_s(sample_bytes: int = 256 << 20) -> float:
    """hashlib's sha256 rate on one core (the floor of any path that hashes every output byte)."""
    import hashlib

    data = os.urandom(sample_bytes)
    started = time.perf_counter()
    hashlib.sha256(data).digest()
    return sample_bytes / MB / (time.perf_counter() - started)


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
        reshard_bytes = total // 5  # below every input shard: no output shard can be an input file
        times: dict[str, list[float]] = {"cp": [], "cp_fsync": [], "as_is": [], "resharded": []}
        cpu: dict[str, list[float]] = {"cp": [], "as_is": [], "resharded": []}
        rss: list[int] = []
        outputs: dict[str, dict] = {}
        load_before = os.getloadavg()[0]
        for trial in range(trials):
            settle()
            seconds, cpu_seconds = time_cp(shards, scratch / f"cp-{trial}", fsync=False)
            times["cp"].append(seconds)
            cpu["cp"].append(cpu_seconds)
            settle()
            times["cp_fsync"].append(time_cp(shards, scratch / f"cpf-{trial}", fsync=True)[0])
            for mode, limit in (("as_is", DEFAULT_MAX_SHARD_BYTES), ("resharded", reshard_bytes)):
                settle()
                seconds, peak, cpu_seconds, outputs[mode] = time_consolidate(source, scratch / f"{mode}-{trial}", limit)
                times[mode].append(seconds)
                cpu[mode].append(cpu_seconds)
                rss.append(peak)
            for name in (f"cp-{trial}", f"cpf-{trial}", f"as_is-{trial}", f"resharded-{trial}"):
                shutil.rmtree(scratch / name)
        hash_rate = sha256_mb_per_s()

        def rate(mode: str) -> float:
            return source_bytes / MB / statistics.median(times[mode])

        cp_s = statistics.median(times["cp"])
        cores = os.cpu_count() or 1
        floor_s = max(cp_s, (source_bytes / MB / hash_rate + statistics.median(cpu["cp"])) / cores)
        peak_rss = max(rss)
        rss_limit = 2 * largest + 200 * MB
        figures = {
            "bench": "export",
            "bytes": source_bytes,
            "input_shards": len(shards),
            "output_shards_as_is": len(outputs["as_is"].get("weights", [])),
            "output_shards_resharded": len(outputs["resharded"].get("weights", [])),
            "trials": trials,
            "mb_per_s": round(rate("as_is"), 1),
            "ratio_vs_cp": round(rate("as_is") / rate("cp"), 3),
            "ratio_vs_cp_fsync": round(rate("as_is") / rate("cp_fsync"), 3),
            "resharded_mb_per_s": round(rate("resharded"), 1),
            "resharded_ratio_vs_cp": round(rate("resharded") / rate("cp"), 3),
            "resharded_ratio_vs_cp_fsync": round(rate("resharded") / rate("cp_fsync"), 3),
            "resharded_max_ratio_vs_cp": round(cp_s / floor_s, 3),
            "baseline_cp_mb_per_s": round(rate("cp"), 1),
            "baseline_cp_fsync_mb_per_s": round(rate("cp_fsync"), 1),
            "sha256_mb_per_s_one_core": round(hash_rate, 1),
            "seconds": {mode: [round(t, 3) for t in values] for mode, values in times.items()},
            "cpu_s_per_gb": {mode: round(statistics.median(values) / (source_bytes / 10**9), 3)
                             for mode, values in cpu.items()},
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "cpu_count": cores,
            "largest_tensor_mb": round(largest / MB, 1),
            "peak_rss_mb": round(peak_rss / MB, 1),
            "rss_limit_mb": round(rss_limit / MB, 1),
            "peak_rss_method": "os.wait4 ru_maxrss of the consolidating child process",
        }
        figures["target"] = "mb_per_s (as-is) >= 0.7 x baseline_cp_mb_per_s and peak_rss_mb < rss_limit_mb"
        figures["target_met"] = rate("as_is") >= 0.7 * rate("cp") and peak_rss < rss_limit
        print(json.dumps(figures))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
