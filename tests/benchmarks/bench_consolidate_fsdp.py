"""Benchmark: consolidating FSDP2 rank shards into a flat safetensors model, three ways, against
the same checkpoint:

- naive (the baseline): torch.load every rank file, gather each tensor (torch.cat of the
  DTensors' local pieces), safetensors' save_file of the full state;
- local: rlkeep's consolidate() of the rank files on local disk (memory-mapped, streamed into
  the output shards);
- store: the export step's path, the rank files read in place from the local S3 server
  (SeaweedFS) by ranged GETs straight into the output shards (rlkeep.export.fsdp_store);
- download_local: the export step's path before that, the rank files downloaded from the same
  server into a work folder, then consolidate() from there.

The checkpoint: W rank processes joined by torch.distributed (gloo) each build their rows of every
tensor as a DTensor Shard(0) on a 1-D mesh and torch.save the state dict, the pickle SkyRL's
FSDP2 save writes (`model_world_size_W_rank_R.pt`), with optimizer and extra-state files beside
them that consolidation must never read. Tensors: an LLM-like mix of BF16 rows of 2048 columns
(embedding and lm_head an eighth of the model each, 48 block tensors the rest).

Per way, in a child process: wall and CPU seconds (os.wait4), peak RSS (ru_maxrss, which counts
mapped file pages) and the peak of anonymous memory (RssAnon of /proc/<pid>/status, sampled
every SAMPLE_S), bytes read (rchar of /proc/<pid>/io: file reads and socket reads; pages of a
memory-mapped file are not in it, so for `local` the bytes of the files it opened are given),
the output's per-tensor sha256, which must equal the naive output's, and for the two ways from the
store the peak bytes on disk of the work folder and the output (sampled with the memory).

    .venv/bin/python tests/benchmarks/bench_consolidate_fsdp.py [--sizes-gb 1 4] [--quick]

--quick: 0.2 GB. Writes bench/results/consolidate_fsdp.json (--out); the last stdout line is the
figures as JSON.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

GB = 10**9
COLUMNS = 2048
WORLD = 4
SAMPLE_S = 0.05
BUCKET = "ckpts"
PREFIX = "run/ckpts/global_step_20"

RANK = """
import sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
out, rank, world, port, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
state = {}
for number, count in enumerate(int(r) for r in rows.split(",")):
    per = -(-count // world)
    mine = max(0, min(count, (rank + 1) * per) - rank * per)
    generator = torch.Generator().manual_seed(number * 1000 + rank)
    local = torch.randint(-16000, 16000, (mine, %(columns)d), dtype=torch.int16, generator=generator).view(torch.bfloat16)
    name = "model.embed_tokens.weight" if number == 0 else "lm_head.weight" if number == len(rows.split(",")) - 1 \\
        else f"model.layers.{number - 1:02d}.weight"
    state[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size((count, %(columns)d)),
                                     stride=(%(columns)d, 1))
torch.save(state, f"{out}/model_world_size_{world}_rank_{rank}.pt")
torch.save({"state": {}, "param_groups": []}, f"{out}/optim_world_size_{world}_rank_{rank}.pt")
torch.save({"rng": torch.get_rng_state()}, f"{out}/extra_state_world_size_{world}_rank_{rank}.pt")
dist.barrier()
dist.destroy_process_group()
""" % {"columns": COLUMNS}

NAIVE = """
import sys, torch
from pathlib import Path
from safetensors.torch import save_file
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
ranks = sorted(src.glob("model_world_size_*_rank_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
states = [torch.load(p, map_location="cpu", weights_only=False) for p in ranks]
full = {name: torch.cat([state[name].to_local() for state in states]) for name in states[0]}
dst.mkdir()
save_file(full, str(dst / "model.safetensors"), metadata={"format": "pt"})
"""

LOCAL = """
import sys
from rlkeep.export import consolidate
consolidate(sys.argv[1], sys.argv[2])
"""

STORE = """
import json, os, sys
from pathlib import Path
from rlkeep.export import detect_format
from rlkeep.export.consolidate import consolidate_source
from rlkeep.export.fsdp_store import fsdp_store_source
from rlkeep.export.sources import StoreRange
from rlkeep.storage import open_store
small, dst, url, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
store = open_store(url)
sizes = {info.key[len(prefix) + 1:]: info.size for info in store.list(prefix)}
detection = detect_format(sizes)
needed = {name: sizes[name] for name in detection.needed_files}
source = fsdp_store_source(store, prefix, needed, small, detection)
ranged = sum(p.length for t in source.tensors for p in t.pieces if isinstance(p, StoreRange))
metadata = int(next(n for n in source.notes if "read in place" in n).split(": ", 1)[1].split(" ")[0].replace(",", ""))
consolidate_source(source, dst, detection=detection, origin=url, sizes=needed)
print(json.dumps({"store_bytes_read": ranged + metadata}))
"""

DOWNLOAD_LOCAL = """
import json, sys
from pathlib import Path
from rlkeep.export import consolidate, detect_format
from rlkeep.storage import open_store
work, dst, url, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
store = open_store(url)
sizes = {info.key[len(prefix) + 1:]: info.size for info in store.list(prefix)}
detection = detect_format(sizes)
for name in detection.needed_files:
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    with open(work / name, "wb") as handle:
        store.read_into(f"{prefix}/{name}", handle)
consolidate(work, dst, detection=detection)
print(json.dumps({"store_bytes_read": sum(sizes[name] for name in detection.needed_files)}))
"""


def tensor_rows(total_bytes: int) -> list[int]:
    """Rows of COLUMNS BF16 values: embedding and lm_head an eighth of the bytes each, 48 blocks the rest."""
    row = COLUMNS * 2
    big = max(1, total_bytes // 8 // row)
    block = max(1, (total_bytes - 2 * big * row) // 48 // row)
    return [big] + [block] * 48 + [big]


def write_checkpoint(step_dir: Path, total_bytes: int) -> None:
    policy = step_dir / "policy"
    (policy / "huggingface").mkdir(parents=True)
    rows = ",".join(str(r) for r in tensor_rows(total_bytes))
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(policy), str(rank), str(WORLD), str(port), rows],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for rank in range(WORLD)]
    failed = [(rank, proc.communicate()[1]) for rank, proc in enumerate(ranks)]
    if any(proc.returncode for proc in ranks):
        raise SystemExit("rank process failed:\n" + "\n".join(f"rank {r}: {err[-2000:]}" for r, err in failed))
    (policy / "fsdp_config.json").write_text(json.dumps({"fsdp_strategy": "fsdp2", "world_size": WORLD}, indent=4))
    (policy / "huggingface" / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                                   "model_type": "qwen3"}))
    (policy / "huggingface" / "tokenizer.json").write_text(
        json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (policy / "huggingface" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    (step_dir / "trainer_state.pt").write_bytes(b"\0" * 1024)


def folder_bytes(folders: list[Path]) -> int:
    total = 0
    for folder in folders:
        for directory, _, names in os.walk(folder):
            for name in names:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
    return total


def measure(code: str, *args: str, env: dict[str, str] | None = None, watch: list[Path] | None = None) -> dict[str, Any]:
    """Run code in a child: wall and CPU seconds, peak RSS, sampled peak RssAnon, rchar, the peak bytes
    under the `watch` folders, and its stdout JSON."""
    wrapper = ("import runpy, sys\nsys.argv = ['child', *sys.argv[1:]]\n"
               f"exec(compile({code!r}, 'child', 'exec'))\n"
               "print('IO', open('/proc/self/io').read().replace(chr(10), ' '), flush=True)\n")
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", wrapper, *args], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **(env or {})})
    peak_anon = peak_disk = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_anon, peak_disk
        while not done.is_set():
            if watch:
                peak_disk = max(peak_disk, folder_bytes(watch))
            try:
                with open(f"/proc/{child.pid}/status") as status:
                    for line in status:
                        if line.startswith("RssAnon:"):
                            peak_anon = max(peak_anon, int(line.split()[1]) * 1024)
            except (OSError, ValueError):
                pass
            time.sleep(SAMPLE_S)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child failed ({os.waitstatus_to_exitcode(status)}):\n{output[-2000:]}")
    io_line = next(line for line in output.splitlines() if line.startswith("IO "))
    io = dict((k.rstrip(":"), int(v)) for k, v in zip(io_line.split()[1::2], io_line.split()[2::2]))
    figures = {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
               "peak_rss_mb": round(usage.ru_maxrss * 1024 / 1e6, 1), "peak_anon_mb": round(peak_anon / 1e6, 1),
               "rchar_mb": round(io["rchar"] / 1e6, 1)}
    if watch:
        figures["peak_disk_mb"] = round(peak_disk / 1e6, 1)
    for line in output.splitlines():
        if line.startswith("{"):
            figures.update(json.loads(line))
    return figures


def tensor_digests(model_dir: Path) -> dict[str, str]:
    from rlkeep.export import read_safetensors_header

    digests = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        header = read_safetensors_header(path)
        with open(path, "rb") as handle:
            for entry in header.tensors:
                handle.seek(header.data_start + entry.start)
                digest, left = hashlib.sha256(), entry.nbytes
                while left:
                    chunk = handle.read(min(left, 8 << 20))
                    digest.update(chunk)
                    left -= len(chunk)
                digests[entry.name] = digest.hexdigest()
    return digests


def settle() -> None:
    os.sync()
    time.sleep(0.5)


def run_size(total_bytes: int, scratch: Path, s3: Any) -> dict[str, Any]:
    step_dir = scratch / "global_step_20"
    write_checkpoint(step_dir, total_bytes)
    policy = step_dir / "policy"
    rank_files = sorted(policy.glob("model_world_size_*.pt"))
    rank_bytes = sum(p.stat().st_size for p in rank_files)
    other_bytes = sum(p.stat().st_size for p in policy.glob("*_world_size_*.pt")) - rank_bytes

    from rlkeep.storage import open_store

    store_url = f"s3://{BUCKET}"
    store = open_store(store_url)
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        store.put_file(f"{PREFIX}/{path.relative_to(step_dir).as_posix()}", path)
    small = scratch / "small" / "policy"
    shutil.copytree(policy / "huggingface", small / "huggingface")
    shutil.copy(policy / "fsdp_config.json", small / "fsdp_config.json")

    load = [round(os.getloadavg()[0], 2)]
    ways: dict[str, dict[str, Any]] = {}
    digests: dict[str, dict[str, str]] = {}
    work = scratch / "work"
    work.mkdir()
    store_ways = {"store": (STORE, small.parent), "download_local": (DOWNLOAD_LOCAL, work)}
    for way, code, args in (("naive", NAIVE, (str(policy), str(scratch / "out-naive"))),
                            ("local", LOCAL, (str(step_dir), str(scratch / "out-local"))),
                            *((way, code, (str(src), str(scratch / f"out-{way}"), store_url, PREFIX))
                              for way, (code, src) in store_ways.items())):
        settle()
        watch = [Path(args[0]), scratch / f"out-{way}"] if way in store_ways else None
        ways[way] = measure(code, *args, env=s3.env(), watch=watch)
        load.append(round(os.getloadavg()[0], 2))
        digests[way] = tensor_digests(scratch / f"out-{way}")
        shutil.rmtree(scratch / f"out-{way}")
    ways["local"]["files_opened_mb"] = round(rank_bytes / 1e6, 1)
    model_bytes = sum(r * COLUMNS * 2 for r in tensor_rows(total_bytes))
    for figures in ways.values():
        figures["cpu_s_per_gb"] = round(figures["cpu_s"] / (model_bytes / GB), 2)
    equal = all(digests[way] == digests["naive"] for way in ways) and len(digests["naive"]) == 50
    shutil.rmtree(step_dir)
    shutil.rmtree(scratch / "small")
    shutil.rmtree(work)
    store.delete([info.key for info in store.list(PREFIX)])
    return {
        "model_bytes": model_bytes, "rank_file_bytes": rank_bytes, "optimizer_and_extra_bytes": other_bytes,
        "world_size": WORLD, "tensors": 50, "ways": ways,
        "speedup_local_vs_naive": round(ways["naive"]["wall_s"] / ways["local"]["wall_s"], 2),
        "speedup_store_vs_naive": round(ways["naive"]["wall_s"] / ways["store"]["wall_s"], 2),
        "speedup_store_vs_download_local": round(ways["download_local"]["wall_s"] / ways["store"]["wall_s"], 2),
        "disk_peak_store_per_model_byte": round(ways["store"]["peak_disk_mb"] * 1e6 / model_bytes, 3),
        "disk_peak_download_local_per_model_byte": round(ways["download_local"]["peak_disk_mb"] * 1e6 / model_bytes, 3),
        "outputs_equal_naive": equal, "load_average_1m": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--quick", action="store_true", help="0.2 GB only")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory on the disk to measure")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "consolidate_fsdp.json")
    args = parser.parse_args()
    sizes = [0.2] if args.quick else args.sizes_gb

    from rlkeep_dev.devserver.s3 import S3Server

    scratch = Path(tempfile.mkdtemp(prefix="bench-fsdp-", dir=args.dir))
    results = []
    try:
        with S3Server(scratch / "s3") as s3:
            s3.create_bucket(BUCKET)
            os.environ.update(s3.env())
            for size in sizes:
                print(f"{size} GB ...", file=sys.stderr, flush=True)
                results.append({"size_gb": size, **run_size(int(size * GB), scratch, s3)})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures = {
        "bench": "consolidate_fsdp", "cpu_count": os.cpu_count(), "sizes": results,
        "machine_note": "shared 2-core machine: the load average (before and after each way) is in each size",
        "baseline_note": "naive neither fsyncs nor hashes its output; local, store and download_local write, "
                         "sha256, fsync and verify theirs; the rank files were just written, so local and naive "
                         "read them from the page cache",
        "peak_anon_method": f"RssAnon of /proc/<pid>/status sampled every {SAMPLE_S}s; peak_rss_mb is ru_maxrss "
                            "(mapped file pages included)",
        "target": "every way's output equals the naive one; local faster than naive; store with less anonymous "
                  "memory than naive and at most 1.05 bytes on disk per model byte",
    }
    figures["target_met"] = all(r["outputs_equal_naive"] and r["speedup_local_vs_naive"] > 1
                                and r["ways"]["store"]["peak_anon_mb"] < r["ways"]["naive"]["peak_anon_mb"]
                                and r["disk_peak_store_per_model_byte"] <= 1.05 for r in results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
