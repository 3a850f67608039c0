"""Restore end to end on a generated run (S3 = SeaweedFS, the Hub server, the Iris stand-in):
run to DONE with reclamation authorized, delete the data root, restore from the destination alone,
and rebuild the metric surface and the trial table from the restored tree with `rlkeep metrics`:
equal to the originals. The archive on the Hub and on file:// restores the same way. A member
changed at the destination after verification stops the rehearsal, and so reclamation, naming it.
"""
from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from rlkeep.storage import open_store
from tests.conftest import run_snakemake, seed_example
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"


def rlkeep(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "rlkeep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def rebuilt_tables(tree: Path, attempts: list[str], out: Path, cwd: Path) -> tuple[bytes, bytes]:
    """metrics.csv and trials.csv from `rlkeep metrics` over the restored logs and trace tree (the CLI
    names an attempt by its log's file stem: each attempt's trainer.log is linked as <attempt>.log)."""
    named = out / "logs"
    named.mkdir(parents=True)
    for slug in attempts:
        (named / f"{slug}.log").symlink_to(tree / "logs" / "attempts" / slug / "trainer.log")
    result = rlkeep("metrics", *(str(named / f"{slug}.log") for slug in attempts), "--out", str(out / "tables"),
                    "--results-dir", str(tree / "trace_jobs"), cwd=cwd)
    assert result.returncode == 0, result.stderr
    return (out / "tables" / "metrics.csv").read_bytes(), (out / "tables" / "trials.csv").read_bytes()


def attempts_of(record: dict) -> list[str]:
    return [job_id.rstrip("/").rsplit("/", 1)[-1] for job_id in record["chain"]]


def test_reclaimed_run_restores_from_the_destination_alone(tmp_path: Path, data_root: Path, bucket: str, iris,
                                                           hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    env = env_for(hub_server)
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env, config=(f"reclaim_authorized={JOB}",))
    assert result.returncode == 0, result.stderr[-4000:]
    rehearsal = json.loads((data_root / JOB / "verify" / "restore.json").read_text())
    assert rehearsal["status"] == "completed" and rehearsal["missing"] == [] and rehearsal["corrupt"] == []
    assert rehearsal["tools_agree"] == ["metric surface = metrics/metrics.csv", "trial table = metrics/trials.csv"]
    assert not (data_root / JOB / ".work" / "rehearse_restore" / "tree").exists()  # scratch removed
    reclaim = json.loads((data_root / JOB / "reclaim.json").read_text())
    assert reclaim["status"] == "completed" and reclaim["deleted_keys"] > 0
    originals = {name: (data_root / JOB / "metrics" / name).read_bytes() for name in ("metrics.csv", "trials.csv")}
    manifest = (data_root / JOB / "archive" / "MANIFEST").read_bytes()

    shutil.rmtree(data_root)  # the data root is gone; the store's copy was reclaimed
    restored = tmp_path / "restored"
    out = rlkeep("restore", JOB, "--from", record["archive"]["dest"], "--to", str(restored), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (restored / "MANIFEST").read_bytes() == manifest
    metrics, trials = rebuilt_tables(restored, attempts_of(record), tmp_path / "rebuilt", tmp_path)
    assert metrics == originals["metrics.csv"] and trials == originals["trials.csv"]


@pytest.mark.parametrize("dest_kind", ["file", "hub"])
def test_an_archive_on_file_or_the_hub_restores_the_same_tree(tmp_path: Path, data_root: Path, bucket: str, iris,
                                                              hub_server, dest_kind: str) -> None:
    dest = (tmp_path / "archives").as_uri() if dest_kind == "file" else "hf://datasets/demo/run-archives"
    run, record = seed_example(data_root, bucket, iris, record_overrides={"archive": {"dest": dest}})
    env = env_for(hub_server)
    result = run_snakemake(data_root, f"{JOB}/verify/restore.json", env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    originals = {name: (data_root / JOB / "metrics" / name).read_bytes() for name in ("metrics.csv", "trials.csv")}
    # the on-demand target restores into <job>/restore/tree/
    target = run_snakemake(data_root, f"{JOB}/restore/DONE", env=env)
    assert target.returncode == 0, target.stderr[-4000:]
    done = json.loads((data_root / JOB / "restore" / "DONE").read_text())
    assert done["status"] == "completed" and done["restored_files"] == done["expected_files"]

    shutil.rmtree(data_root)
    restored = tmp_path / "restored"
    out = rlkeep("restore", JOB, "--from", dest, "--to", str(restored), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    metrics, trials = rebuilt_tables(restored, attempts_of(record), tmp_path / "rebuilt", tmp_path)
    assert metrics == originals["metrics.csv"] and trials == originals["trials.csv"]


def changed_member(tgz: bytes, pick) -> tuple[bytes, str]:
    """The archive with one member's last byte changed (same size), and that member's name."""
    out, victim = io.BytesIO(), None
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as source, \
            gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info in source:
            data = source.extractfile(info).read()
            if victim is None and pick(info.name):
                victim, data = info.name, data[:-1] + (b"A" if data[-1:] != b"A" else b"B")
            tar.addfile(info, io.BytesIO(data))
    assert victim is not None
    return out.getvalue(), victim


def test_a_member_changed_after_upload_stops_the_rehearsal_and_reclaim(data_root: Path, bucket: str, iris) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides={"archive": {"dest": f"s3://{bucket}/archives"}})
    assert run_snakemake(data_root, f"{JOB}/verify/archive.json").returncode == 0
    archive = open_store(f"s3://{bucket}/archives/{JOB}")
    tampered, victim = changed_member(archive.read_bytes(f"{JOB}_archive.tgz"), lambda name: name.endswith("trainer.log"))
    archive.put_bytes(f"{JOB}_archive.tgz", tampered)
    store = open_store(record["store"])
    before = {info.key for info in store.list()}

    result = run_snakemake(data_root, f"{JOB}/DONE", config=(f"reclaim_authorized={JOB}",))
    assert result.returncode != 0
    log = (data_root / JOB / "logs" / "rehearse_restore.log").read_text()
    assert victim in log and "the MANIFEST says" in log and "changed at its destination" in log
    assert not (data_root / JOB / "verify" / "restore.json").exists()
    assert not (data_root / JOB / "reclaim.json").exists()  # reclamation never ran
    assert {info.key for info in store.list()} == before
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert "rehearse_restore" in status["blocked"] and victim in status["steps"]["rehearse_restore"]["reason"]

    # the remedy the message gives: rebuild and upload the archive, then the same command completes
    fixed = run_snakemake(data_root, f"{JOB}/DONE", extra=("--forcerun", "archive"),
                          config=(f"reclaim_authorized={JOB}",))
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    assert json.loads((data_root / JOB / "reclaim.json").read_text())["status"] == "completed"
