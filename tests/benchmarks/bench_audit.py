"""`rlkeep audit`'s own work at N and 4N items: it must grow linearly with what it walks.

Three walks, each timed in CPU seconds (best of `--rounds`) at N and 4N:
- `local`: rlkeep.audit.local_findings on a job whose DONE lists N exported files and N metric files
  (what STATUS.json also runs after every invocation), every file present;
- `hub_files`: rlkeep.audit.repo_file_findings holding N verified files to a tree listing of N
  (LFS sha256 compared, no network), 20 times per timing as one pass takes under a millisecond;
- `jobs`: rlkeep.audit_run.audit_job over a data root of N finished jobs (local checks, audit.json
  written; no destinations, so no network).
A ratio near 4 is linear; 16 would be quadratic. tests/test_audit.py::test_the_audit_grows_linearly_with_files_and_jobs
runs `measure` at small sizes and fails on a ratio over 6.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from rlkeep.audit import RemoteFile, local_findings, repo_file_findings  # noqa: E402
from rlkeep.audit_run import audit_job  # noqa: E402


def _done(files: int) -> dict:
    return {"completed_at": "bench", "steps": {"export_model": "completed"},
            "export": {"files": [{"path": f"shard-{i:06d}.safetensors", "size": 1, "sha256": "0" * 64}
                                 for i in range(files)]},
            "metrics": [f"metrics/table-{i:06d}.csv" for i in range(files)]}


def job_with_files(root: Path, files: int) -> tuple[Path, dict]:
    job = root / f"job-{files}"
    (job / "model").mkdir(parents=True)
    (job / "metrics").mkdir()
    done = _done(files)
    for entry in done["export"]["files"]:
        (job / "model" / entry["path"]).write_bytes(b"x")
    for relpath in done["metrics"]:
        (job / relpath).write_bytes(b"x")
    return job, done


def data_root_with_jobs(root: Path, jobs: int) -> Path:
    data_root = root / f"root-{jobs}"
    for index in range(jobs):
        job = data_root / f"job-{index:05d}"
        (job / "verify").mkdir(parents=True)
        (job / "DONE").write_text(json.dumps({"completed_at": "bench", "steps": {}, "destinations": "not_applicable"}))
    return data_root


def cpu_seconds(work: Callable[[], object], rounds: int) -> float:
    """The best of `rounds` (the machine is shared), with the cyclic collector paused while timing:
    its passes come with the heap the benchmark itself built, not with the walk."""
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            work()
            best = min(best, time.process_time() - started)
        finally:
            gc.enable()
    return best


def measure(n: int, rounds: int = 3) -> dict[str, dict[str, float]]:
    """{walk: {"n": cpu s at n, "4n": cpu s at 4n, "ratio": 4n / n}}."""
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rlkeep-bench-audit-") as scratch:
        root = Path(scratch)
        timings: dict[str, list[float]] = {"local": [], "hub_files": [], "jobs": []}
        for size in (n, 4 * n):
            job, done = job_with_files(root, size)
            timings["local"].append(cpu_seconds(lambda: local_findings(job, done), rounds))
            expected = {entry["path"]: entry for entry in done["export"]["files"]}
            remote = {path: RemoteFile(1, "0" * 64, None) for path in expected}
            timings["hub_files"].append(cpu_seconds(
                lambda: [repo_file_findings("model", "o/m", expected, remote, lambda p: None, lambda p: None, "r", "s")
                         for _ in range(20)], rounds))
            data_root = data_root_with_jobs(root, size // 10 or 1)
            jobs = sorted(data_root.iterdir())
            timings["jobs"].append(cpu_seconds(lambda: [audit_job(path) for path in jobs], rounds))
        for walk, (small, large) in timings.items():
            figures[walk] = {"n": round(small, 5), "4n": round(large, 5), "ratio": round(large / max(small, 1e-9), 2)}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="items at N (jobs: N/10)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="N=500")
    args = parser.parse_args()
    n = 500 if args.quick else args.n
    figures = measure(n, args.rounds)
    worst = max(walk["ratio"] for walk in figures.values())
    print(json.dumps({"bench": "bench_audit", "n": n, "jobs_at_n": n // 10, **figures, "worst_ratio": worst,
                      "target": "ratio 4N/N under 6 (linear: 4)", "target_met": worst < 6,
                      "load_average": [round(x, 2) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
