"""The up-front free-space check: the whole run's peak on the data root, computed from the store
listing, refused before any transfer when the data root cannot hold it (an injected free-space
figure makes the data root small), said in the sync manifests and STATUS.json otherwise."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlkeep.context import StepContext
from rlkeep.diskspace import FREE_BYTES_ENV, TAR_OVERHEAD_PER_MEMBER, DiskFullError, run_space_need
from rlkeep.records import validate_record_data
from rlkeep.report import build_status
from rlkeep.storage import open_store
from rlkeep.sync import is_weight_or_dump
from rlkeep.sync.step import sync_logs_step, sync_traces_step

SYNC_SETTINGS = {"workers": 4, "max_inflight_mb": 4, "skip_policy": {"max_missing_after_listing": 0}}
TREE = {
    "logs/rl-space.out": b"step 1 reward 0.1\n" * 10,
    "ckpts/latest_ckpt_global_step.txt": b"20",
    "ckpts/global_step_10/model_world_size_2_rank_0.pt": b"\x00" * 300,
    "ckpts/global_step_10/model_world_size_2_rank_1.pt": b"\x00" * 300,
    "ckpts/global_step_10/optim_world_size_2_rank_0.pt": b"\x00" * 5000,  # never downloaded by the export
    "ckpts/global_step_20/model_world_size_2_rank_0.pt": b"\x00" * 400,
    "ckpts/global_step_20/model_world_size_2_rank_1.pt": b"\x00" * 400,
    "exports/global_step_20/policy/model.safetensors": b"\x01" * 700,
    **{f"trace_jobs/task__{i:04d}/result.json": json.dumps({"reward": i % 2}).encode() for i in range(6)},
    **{f"trace_jobs/task__{i:04d}/agent/trajectory.json": b"[]" * (i + 50) for i in range(6)},
}


def test_the_need_counts_both_tars_the_archive_and_the_largest_model_once() -> None:
    """An FSDP step's rank files are read in place into the model, an HF export's shards are linked
    into it: the largest model (step 20's 800 bytes of rank files) is on disk once."""
    need = run_space_need(((key, len(data)) for key, data in TREE.items()), traces_prefix="trace_jobs",
                          ckpts_prefix="ckpts", exports_prefix="exports", left_out=is_weight_or_dump)
    traces = sum(len(d) for k, d in TREE.items() if k.startswith("trace_jobs/"))
    logs = len(TREE["logs/rl-space.out"]) + len(TREE["ckpts/latest_ckpt_global_step.txt"])
    tars = traces + logs + TAR_OVERHEAD_PER_MEMBER * (12 + 2 + 4)
    assert need == {"trace_bytes": traces, "log_bytes": logs, "sync_tar_bytes": tars, "archive_bytes": tars,
                    "model_bytes": 800, "model_copies": 1, "needed_bytes": 2 * tars + 800}


def test_an_export_with_a_shard_over_the_limit_is_counted_twice() -> None:
    """Its shards are repacked from the download, which stays until the model is written: 2 x 700 > 800."""
    need = run_space_need(((key, len(data)) for key, data in TREE.items()), traces_prefix="trace_jobs",
                          ckpts_prefix="ckpts", exports_prefix="exports", left_out=is_weight_or_dump,
                          max_shard_bytes=600)
    assert (need["model_bytes"], need["model_copies"]) == (700, 2)
    assert need["needed_bytes"] == 2 * need["sync_tar_bytes"] + 1400


def record_for(bucket: str, job: str = "rl-space"):
    data = {"job": job, "user": "demo", "scheduler": "none", "chain": [f"/demo/{job}"],
            "store": f"s3://{bucket}/iris/{job}", "checkpoint": {"interval": 10}}
    return validate_record_data(data, Path(f"records/{job}.yaml"))


def bucket_objects(bucket: str) -> dict[str, tuple[int, str | None]]:
    return {info.key: (info.size, info.etag) for info in open_store(f"s3://{bucket}").list()}


def sync(step, data_root: Path, record, stem: str) -> Path:
    job_dir = data_root / record.job
    outputs = {"tar": job_dir / f"sync/{stem}.tar", "manifest": job_dir / f"sync/{stem}.manifest.json"}
    step(StepContext(job=record.job, record=record, data_root=data_root, inputs={}, outputs=outputs,
                     settings=SYNC_SETTINGS))
    return outputs["manifest"]


def test_a_data_root_too_small_for_the_run_is_refused_before_any_transfer(tmp_path: Path, bucket: str,
                                                                          monkeypatch) -> None:
    record = record_for(bucket)
    store = open_store(record.store)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: store.put_bytes(*item), TREE.items()))
    before = bucket_objects(bucket)
    need = run_space_need(((key, len(data)) for key, data in TREE.items()), traces_prefix="trace_jobs",
                          ckpts_prefix="ckpts", exports_prefix="exports",
                          left_out=is_weight_or_dump)["needed_bytes"]
    # enough for each sync tar on its own (the per-step checks pass), not for the whole run
    monkeypatch.setenv(FREE_BYTES_ENV, str(need - 1))
    for step, stem in ((sync_logs_step, "logs"), (sync_traces_step, "trace_jobs")):
        with pytest.raises(DiskFullError) as refused:
            sync(step, tmp_path, record, stem)
        message = str(refused.value)
        assert f"needs {need:,} bytes free" in message and f"has {need - 1:,}" in message, message
        assert "nothing was transferred" in message and "Free at least 1 bytes" in message
    assert not (tmp_path / record.job).exists() or not any((tmp_path / record.job).rglob("*")), \
        "a refused run wrote into its job folder"
    assert bucket_objects(bucket) == before, "a refused run changed the store"

    # the remedy the message names: free the space, rerun the same command; the run goes on
    monkeypatch.setenv(FREE_BYTES_ENV, str(need))
    manifests = [sync(sync_logs_step, tmp_path, record, "logs"), sync(sync_traces_step, tmp_path, record, "trace_jobs")]
    for manifest in manifests:
        assert json.loads(manifest.read_text())["space"]["needed_bytes"] == need
    assert build_status(tmp_path / record.job, record=record)["disk"]["needed_bytes"] == need


def test_a_resumed_run_needs_only_what_its_job_folder_does_not_hold(tmp_path: Path, bucket: str,
                                                                    monkeypatch) -> None:
    record = record_for(bucket)
    store = open_store(record.store)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: store.put_bytes(*item), TREE.items()))
    logs_manifest = sync(sync_logs_step, tmp_path, record, "logs")
    held = sum(path.stat().st_size for path in (tmp_path / record.job).rglob("*") if path.is_file())
    need = json.loads(logs_manifest.read_text())["space"]["needed_bytes"]
    monkeypatch.setenv(FREE_BYTES_ENV, str(need - held))
    sync(sync_traces_step, tmp_path, record, "trace_jobs")  # the logs tar already there counts
    assert build_status(tmp_path / record.job, record=record)["disk"]["needed_bytes"] == need
