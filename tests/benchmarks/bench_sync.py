"""Trace sync (tar then transfer) against `aws s3 sync` to a folder plus `tar` of that folder.

Both read the same prefix of small objects (1-50 KB) from a local SeaweedFS in one run. The
target: rlkeep's sync takes at most half the wall time of the baseline, with peak memory
(ru_maxrss of the child that runs it) under 300 MB. The AWS CLI lives in its own venv under
bench/ because it pins a different botocore than rlkeep.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
AWSCLI = "awscli==1.46.2"

RLKEEP_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from rlkeep.records import validate_record_data
from rlkeep.steps import StepContext
from rlkeep.sync import sync_traces
store, out = sys.argv[1], Path(sys.argv[2])
record = validate_record_data({"job": "bench", "user": "bench", "scheduler": "none", "chain": ["/bench/bench"],
    "store": store, "checkpoint": {"interval": 20}}, Path("records/bench.yaml"))
ctx = StepContext(job="bench", record=record, data_root=out, inputs={},
    outputs={"tar": out / "trace_jobs.tar", "manifest": out / "trace_jobs.manifest.json"},
    settings={"workers": 32, "max_inflight_mb": 128, "skip_policy": {}})
start = time.monotonic(); sync_traces(ctx); elapsed = time.monotonic() - start
print(json.dumps({"seconds": elapsed, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def aws_cli() -> Path:
    venv = REPO / "bench" / ".venv-awscli"
    binary = venv / "bin" / "aws"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", AWSCLI], check=True)
    return binary


def seed(s3, bucket: str, count: int) -> int:
    import boto3

    s3.create_bucket(bucket)
    client = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                          aws_secret_access_key=s3.secret_key, region_name="us-east-1")
    rng = random.Random(0)
    sizes = [rng.randint(1_000, 50_000) for _ in range(count)]
    payload = os.urandom(50_000)

    def put(i: int) -> None:
        trial = f"task-{i % 500:04d}__{i:07d}"
        name = ("result.json", "agent/trajectory.json", "config.json", "trial.log")[i % 4]
        client.put_object(Bucket=bucket, Key=f"iris/bench/trace_jobs/{trial}/{name}", Body=payload[: sizes[i]])

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(count)))
    return sum(sizes)


def timed_child(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed: {result.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(after, before) / 1024, result.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--objects", type=int, default=None)
    args = parser.parse_args()
    count = args.objects or (1_000 if args.quick else 20_000)
    sys.path.insert(0, str(REPO / "scripts"))
    from rlkeep.devserver.s3 import S3Server

    aws = aws_cli()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp, S3Server(Path(tmp) / "s3") as s3:
        total_bytes = seed(s3, "bench", count)
        env = {**os.environ, **s3.env()}
        ours_dir = Path(tmp) / "ours"
        ours_dir.mkdir()
        ours_s, _, out = timed_child([sys.executable, "-c", RLKEEP_CHILD, "s3://bench/iris/bench", str(ours_dir)], env)
        ours_rss = json.loads(out.strip().splitlines()[-1])["maxrss_mb"]

        mirror = Path(tmp) / "mirror"
        sync_s, _, _ = timed_child([str(aws), "s3", "sync", "--only-show-errors", "--endpoint-url", s3.endpoint,
                                    "s3://bench/iris/bench/trace_jobs", str(mirror)], env)
        tar_s, _, _ = timed_child(["tar", "-cf", str(Path(tmp) / "baseline.tar"), "-C", str(mirror), "."], env)
        baseline_s = sync_s + tar_s
    figures = {
        "bench": "sync",
        "objects": count,
        "mb": round(total_bytes / 1e6, 1),
        "rlkeep_s": round(ours_s, 2),
        "rlkeep_objects_per_s": round(count / ours_s),
        "rlkeep_mb_per_s": round(total_bytes / 1e6 / ours_s, 2),
        "rlkeep_peak_rss_mb": round(ours_rss, 1),
        "baseline_aws_sync_s": round(sync_s, 2),
        "baseline_tar_s": round(tar_s, 2),
        "baseline_objects_per_s": round(count / baseline_s),
        "speedup": round(baseline_s / ours_s, 2),
        "target": "rlkeep <= 0.5 x baseline wall time, peak RSS < 300 MB",
        "target_met": ours_s <= 0.5 * baseline_s and ours_rss < 300,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
