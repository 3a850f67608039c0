"""Shared fixtures: a real S3 server (SeaweedFS) on 127.0.0.1, the Iris stand-in, data roots.

The S3 server is started once per session and every test gets its own bucket. Its
credentials go into os.environ (boto3 reads them there, as in production) and into the
environment of every Snakemake subprocess.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rlkeep_dev.devserver.iris import install_executable
from rlkeep_dev.devserver.noslurm import no_cluster_env
from rlkeep_dev.devserver.s3 import S3Server

REPO = Path(__file__).resolve().parents[1]
_bucket_numbers = itertools.count()
# every Snakemake start would otherwise wait ~9 s on scontrol where SLURM's client has no cluster
os.environ.update(no_cluster_env(Path(tempfile.mkdtemp(prefix="rlkeep-no-slurm-"))))
# huggingface_hub as a user runs it: Xet on unless the Hub has none (a developer's own switch is not the suite's)
os.environ.pop("HF_HUB_DISABLE_XET", None)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    saved = {key: os.environ.get(key) for key in server.env()}
    os.environ.update(server.env())
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> str:
    name = f"t{next(_bucket_numbers)}-{os.getpid()}"
    s3_server.create_bucket(name)
    return name


class IrisStandin:
    """The stand-in `iris` (rlkeep_dev.devserver.iris) on PATH with its state and call log.

    version: the emulated CLI version (a..f); None leaves IRIS_STANDIN_VERSION to the
    environment (unset: the newest, f)."""

    EXACT_STOP = {"a": ("stop", "--no-include-children"), "b": ("stop", "--no-include-children"),
                  "c": ("stop", "--no-include-children"), "d": ("stop",), "e": ("cancel", "--exact"), "f": ("cancel",)}

    def __init__(self, root: Path, version: str | None = None) -> None:
        self.bin_dir = root / "bin"
        self.state_path = root / "iris-state.json"
        self.calls_path = root / "iris-calls.jsonl"
        self.version = version
        install_executable(self.bin_dir)
        self.write_state({"jobs": {}})
        self.calls_path.touch()

    def write_state(self, state: dict) -> None:
        self.state_path.write_text(json.dumps(state, indent=2))

    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def states(self) -> dict[str, str]:
        return {job_id: job["state"] for job_id, job in self.state()["jobs"].items()}

    def calls(self) -> list[list[str]]:
        return [json.loads(line)["argv"] for line in self.calls_path.read_text().splitlines() if line]

    def stop_calls(self) -> list[list[str]]:
        """Every call that stops something (stop, kill, cancel), never a `--help`."""
        return [argv for argv in self.calls()
                if any(word in argv for word in ("stop", "kill", "cancel")) and "--help" not in argv]

    def exact_stop(self, job_id: str, cluster: str = "cw-test") -> list[str]:
        """The exact-stop call rlkeep makes for this version."""
        command, *flags = self.EXACT_STOP[self.version or os.environ.get("IRIS_STANDIN_VERSION", "f")]
        return [f"--cluster={cluster}", "job", command, job_id, *flags]

    def env(self) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "IRIS_STANDIN_STATE": str(self.state_path),
            "IRIS_STANDIN_CALLS": str(self.calls_path),
            "RLKEEP_IRIS_STOP_POLL_S": "0.05",
            "RLKEEP_IRIS_STOP_WAIT_S": "10",
        }
        if self.version:
            env["IRIS_STANDIN_VERSION"] = self.version
        return env


@pytest.fixture
def iris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> IrisStandin:
    standin = IrisStandin(tmp_path / "iris")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    return standin


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "records").mkdir(parents=True)
    return root


def write_record(data_root: Path, record: dict) -> Path:
    path = data_root / "records" / f"{record['job']}.yaml"
    path.write_text(yaml.safe_dump(record, sort_keys=False))
    return path


def run_snakemake(data_root: Path, *targets: str, extra: tuple[str, ...] = (), config: tuple[str, ...] = (),
                  env: dict[str, str] | None = None, profile: str = "local", timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real pipeline in a subprocess, as an operator would (targets before --config)."""
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--profile", str(REPO / "profiles" / profile), *targets, *extra,
    ]
    if config:
        command += ["--config", *config]
    return subprocess.run(command, cwd=data_root, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def seed_example(data_root: Path, bucket: str, iris: IrisStandin, *, job: str = "rl-demo", n_trials: int = 24,
                 record_overrides: dict | None = None, **example_options):
    """A generated finished run uploaded to the real S3 server, its record and Iris state."""
    from rlkeep_dev.example import iris_state, write_example_run
    from rlkeep.storage import open_store, upload_tree

    run = write_example_run(data_root.parent / f"example-{job}", job=job, user="demo", n_trials=n_trials,
                            large_result_mb=0.5, large_pane_mb=0.3, **example_options)
    store_url = f"s3://{bucket}/iris/{job}"
    upload_tree(run.root, open_store(store_url))
    record = run.record(store_url=store_url, scheduler="iris", cluster="cw-test")
    record.update(record_overrides or {})
    write_record(data_root, record)
    iris.write_state(iris_state(run))
    return run, record
