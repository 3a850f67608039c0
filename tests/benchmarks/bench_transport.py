"""rlkeep's own S3 read path (a SigV4 query presigner and a keep-alive HTTP/1.1 client:
rlkeep.storage.signer, rlkeep.storage.connection) beside well-kept libraries doing the same GETs, in
the whole command a user runs: `snakemake --profile local <job>/sync/trace_jobs.tar` from a fresh
data root over N objects (default 2,000) on SeaweedFS, on `make setup`'s venv (this interpreter).

Contenders differ only in how the sync step GETs one object (`S3Store._get`: body into the sink,
sha256 while it streams): rlkeep's own path; botocore's `get_object` (RLKEEP_S3_PRESIGNED_GET=0, the
product's fallback); obstore (Rust `object_store`) and the AWS CRT S3 client (`awscrt`, what boto3
uses with `[crt]`). The libraries are installed (pinned, no dependencies) into the benchmark cache
and reach only the sync step's process, through a sitecustomize that swaps `S3Store._get` there:
Snakemake's own process is the same for every contender. Interleaved, load recorded.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402
from bench_sync import seed  # noqa: E402

REPO = peers.REPO
LIBRARIES = ("obstore==0.12.1", "awscrt==0.38.0")

SITECUSTOMIZE = r'''
import os, sys
TRANSPORT = os.environ.get("RLKEEP_BENCH_TRANSPORT")
if TRANSPORT and sys.argv and sys.argv[0].endswith(".sync_traces.py"):
    import hashlib, threading
    from urllib.parse import quote, urlsplit
    from rlkeep.storage.s3 import S3Store

    ENDPOINT = os.environ["AWS_ENDPOINT_URL_S3"]
    KEY, SECRET = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    local = threading.local()

    def stream_into(chunks, sink):
        digest, size = hashlib.sha256(), 0
        for chunk in chunks:
            sink.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        return size, digest.hexdigest()

    if TRANSPORT == "obstore":
        import obstore
        from obstore.store import S3Store as ObjectStore
        stores = {}

        def _get(self, full_key, sink):
            store = stores.get(self.bucket)
            if store is None:
                store = stores[self.bucket] = ObjectStore(
                    self.bucket, endpoint=ENDPOINT, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                    virtual_hosted_style_request=False, client_options={"allow_http": True})
            result = obstore.get(store, full_key)
            size, digest = stream_into(result.stream(min_chunk_size=1 << 20), sink)
            return size, int(result.meta["size"]), digest

    elif TRANSPORT == "awscrt":
        from concurrent.futures import Future
        from awscrt import auth, http, io as crt_io, s3 as crt_s3
        group = crt_io.EventLoopGroup()
        bootstrap = crt_io.ClientBootstrap(group, crt_io.DefaultHostResolver(group))
        client = crt_s3.S3Client(bootstrap=bootstrap, region=REGION,
                                 credential_provider=auth.AwsCredentialsProvider.new_static(KEY, SECRET),
                                 tls_mode=crt_s3.S3RequestTlsMode.DISABLED)
        HOST = urlsplit(ENDPOINT).netloc

        def _get(self, full_key, sink):
            digest, state = hashlib.sha256(), {"size": 0, "length": -1, "status": 0}
            lock = threading.Lock()

            def on_headers(status_code, headers, **kwargs):
                state["status"] = status_code
                for name, value in headers:
                    if name.lower() == "content-length":
                        state["length"] = int(value)

            def on_body(chunk, offset, **kwargs):
                with lock:
                    sink.write(chunk)
                    digest.update(chunk)
                    state["size"] += len(chunk)

            request = http.HttpRequest("GET", f"/{self.bucket}/{quote(full_key)}", http.HttpHeaders([("Host", HOST)]))
            made = client.make_request(type=crt_s3.S3RequestType.GET_OBJECT, request=request, on_headers=on_headers,
                                       on_body=on_body)
            made.finished_future.result()
            return state["size"], state["size"], digest.hexdigest()
    else:
        raise SystemExit(f"RLKEEP_BENCH_TRANSPORT={TRANSPORT}: unknown")
    import atexit
    calls = []

    def counted(self, full_key, sink):
        calls.append(1)
        return _get(self, full_key, sink)

    def write_count():
        with open(os.environ["RLKEEP_BENCH_TRANSPORT_MARK"], "w") as out:
            out.write(str(len(calls)))

    atexit.register(write_count)
    S3Store._get = counted  # the benchmark's swap, in the step's process only
'''


def transports_dir() -> Path:
    """The pinned libraries and the sitecustomize, in the benchmark cache (never in the repository)."""
    target = peers.bench_env().parent / "transports"
    stamp = target / (".installed-" + "-".join(LIBRARIES))
    if not stamp.exists():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--target", str(target), *LIBRARIES], check=True)
        stamp.touch()
    (target / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return target


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--objects", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="contender names to run")
    args = parser.parse_args()
    peers.stop_on_sigterm()
    count = args.objects or (500 if args.quick else 2_000)
    rounds = args.rounds or (1 if args.quick else 3)
    shim = transports_dir()
    sys.path.insert(0, str(REPO / "scripts"))
    from rlkeep_dev.devserver.s3 import S3Server

    versions = {}
    for requirement in LIBRARIES:
        versions[requirement.split("==")[0]] = requirement.split("==")[1]
    work_root = Path(os.environ.get("RLKEEP_BENCH_TMP", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="bench-transport-", dir=work_root) as tmp, S3Server(Path(tmp) / "s3") as s3:
        total_bytes = seed(s3, "bench", count)
        base_env = {**os.environ, **s3.env(), "PYTHONPATH": f"{shim}{os.pathsep}{REPO / 'scripts'}"}
        roots = iter(range(1_000_000))

        def command(name: str, **env: str) -> peers.Contender:
            def run() -> dict[str, Any]:
                data_root = Path(tmp) / f"root-{next(roots)}"
                (data_root / "records").mkdir(parents=True)
                (data_root / "records" / "bench.yaml").write_text(json.dumps(
                    {"job": "bench", "user": "bench", "scheduler": "none", "chain": ["/bench/bench"],
                     "store": "s3://bench/iris/bench", "checkpoint": {"interval": 20}}))
                mark = data_root.with_name(data_root.name + ".gets")
                timed = peers.run_timed([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                                         "--profile", str(REPO / "profiles" / "local"), "bench/sync/trace_jobs.tar"],
                                        env={**base_env, **env, "RLKEEP_BENCH_TRANSPORT_MARK": str(mark)},
                                        cwd=data_root)
                manifest = json.loads((data_root / "bench" / "sync" / "trace_jobs.manifest.json").read_text())
                if manifest["objects_synced"] != count:
                    raise RuntimeError(f"{name}: the command synced {manifest['objects_synced']} of {count} objects")
                if "RLKEEP_BENCH_TRANSPORT" in env and int(mark.read_text()) != count:
                    raise RuntimeError(f"{name}: {mark.read_text()} GETs went through the library, not {count}")
                shutil.rmtree(data_root, ignore_errors=True)
                return {"seconds": timed.seconds, "maxrss_mb": round(timed.maxrss_mb, 1)}
            return peers.Contender(name, run)

        contenders = [command("rlkeep's own signer and connection"),
                      command("botocore get_object", RLKEEP_S3_PRESIGNED_GET="0"),
                      command("obstore", RLKEEP_BENCH_TRANSPORT="obstore"),
                      command("awscrt S3Client", RLKEEP_BENCH_TRANSPORT="awscrt")]
        if args.only:
            contenders = [c for c in contenders if c.name == contenders[0].name or c.name in args.only]
        timed = peers.interleave(contenders, rounds, warmup=1)
    figures = {"python": peers.shown(Path(sys.executable)), "venv": peers.venv_label(Path(sys.executable)),
               "objects": count, "mb": round(total_bytes / 1e6, 1), "libraries": versions,
               "note": "2-core machine shared with other developers' tests and benchmarks: see loadavg_before",
               "subject": timed["subject"], "rounds": rounds, "seconds": timed["seconds"],
               "ratio_vs": timed["ratios"], "runs": timed["runs"]}
    path = peers.write_results(f"bench_transport_{count}", figures)
    print(json.dumps({"bench": "transport", "objects": count, "seconds": timed["seconds"],
                      "ratio_vs": {name: ratio["median"] for name, ratio in timed["ratios"].items()},
                      "results": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
