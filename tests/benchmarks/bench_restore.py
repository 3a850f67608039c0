"""Benchmark: what the restore rehearsal costs beside the verification it follows.

    .venv/bin/python tests/benchmarks/bench_restore.py [--quick] [--trials N] [--log-mb N]

An archive of a generated run (N trials of ~8 files each, 1-60 KB, and two trainer logs of
--log-mb MB) is built and copied to a local SeaweedFS bucket. Then, alternately per round:
`verify`, what verify_archive does with the remote copy (listing, HEAD and a fresh full read
hashed, for the tgz and the MANIFEST), and `restore`, what the rehearsal adds (a fresh streamed
read of the tgz, every member written to scratch and hashed against the MANIFEST), and beside it GNU `tar -xzf` of the local tgz. verify and restore
read the same remote bytes once; the restore also decompresses and writes them. Wall and CPU time
of each, MB/s of the archive, the restore/verify and restore/tar ratios, the peak RSS.
Last stdout line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_sources(root: Path, trials: int, log_mb: int, rng: random.Random) -> tuple[Path, Path]:
    logs, traces = root / "logs.tar", root / "trace_jobs.tar"
    with tarfile.open(logs, "w") as tar:
        for slug in ("run", "run-r1"):
            path = root / f"{slug}.log"
            with open(path, "w") as out:
                for step in range(log_mb * 1024 * 1024 // 200):
                    out.write(f"(skyrl pid=1) Step {step}: {{'reward/avg_raw_reward': {rng.random():.6f}}} {'x' * 120}\n")
            tar.add(path, f"attempts/{slug}/trainer.log")
            path.unlink()
    with tarfile.open(traces, "w") as tar:
        for trial in range(trials):
            for name in ("result.json", "config.json", "agent/trajectory.json", "verifier/reward.txt",
                         "verifier/test-stdout.txt", "trial.log", "lock.json", "manifest.json"):
                data = rng.randbytes(rng.randint(512, 30_000)).hex().encode()
                info = tarfile.TarInfo(f"task-{trial:05d}/{name}")
                info.size = len(data)
                tar.addfile(info, __import__("io").BytesIO(data))
    return logs, traces


def timed(function) -> dict[str, float]:  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def timed_child(command: list[str]) -> dict[str, float]:
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": time.perf_counter() - wall,
            "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--log-mb", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    trials = args.trials or (200 if args.quick else 2000)
    log_mb = args.log_mb or (10 if args.quick else 100)
    rounds = args.rounds or (2 if args.quick else 3)
    sys.path.insert(0, str(REPO / "scripts"))
    from rlkeep.archive import build_archive, upload_archive, verify_uploaded_archive
    from rlkeep.restore import LocalTarget, location_from_url, restore_archive
    from rlkeep_dev.devserver.s3 import S3Server

    with tempfile.TemporaryDirectory(prefix="bench-restore-") as tmp, S3Server(Path(tmp) / "s3") as s3:
        os.environ.update(s3.env())
        s3.create_bucket("bench")
        root = Path(tmp)
        logs, traces = write_sources(root, trials, log_mb, random.Random(7))
        tgz, manifest = root / "job" / "job_archive.tgz", root / "job" / "MANIFEST"
        build_archive(tgz, manifest, sources=[("logs", logs), ("trace_jobs", traces)], extra_files=[],
                      summary={"run": "job", "jobs": ["run", "run-r1"]})
        dest = "s3://bench/archives"
        upload_archive(tgz, manifest, dest, "job")
        results: dict[str, list[dict[str, float]]] = {"verify": [], "restore": [], "tar_xzf": []}
        for _ in range(rounds):
            results["verify"].append(timed(lambda: verify_uploaded_archive(tgz, manifest, dest, "job")))
            scratch = root / "scratch"
            shutil.rmtree(scratch, ignore_errors=True)
            outcome: list = []
            results["restore"].append(timed(lambda: outcome.append(
                restore_archive(location_from_url(dest, "job"), LocalTarget(scratch, durable=False)))))
            assert outcome[0].problems == [], outcome[0].problems
            shutil.rmtree(scratch)
            scratch.mkdir()
            # the peer: GNU tar extracting the local copy (no network read, no check against the MANIFEST)
            results["tar_xzf"].append(timed_child(["tar", "-xzf", str(tgz), "-C", str(scratch)]))
        archive_mb = tgz.stat().st_size / 1e6
        restored_mb = outcome[0].extraction.restored_bytes / 1e6
        best = {name: min(runs, key=lambda r: r["wall_s"]) for name, runs in results.items()}
        summary = {
            "bench": "restore", "trials": trials, "log_mb": log_mb, "rounds": rounds,
            "archive_mb": round(archive_mb, 1), "restored_mb": round(restored_mb, 1),
            "files": len(outcome[0].extraction.restored),
            "verify": results["verify"], "restore": results["restore"],
            "tar_xzf": results["tar_xzf"],
            "restore_over_verify_wall": round(best["restore"]["wall_s"] / best["verify"]["wall_s"], 2),
            "restore_over_tar_xzf_wall": round(best["restore"]["wall_s"] / best["tar_xzf"]["wall_s"], 2),
            "restore_archive_mb_s": round(archive_mb / best["restore"]["wall_s"], 1),
            "restore_restored_mb_s": round(restored_mb / best["restore"]["wall_s"], 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "load": os.getloadavg()[0],
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
