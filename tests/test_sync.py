"""Sync through the real pipeline step against the real S3 server: tar then transfer."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.records import validate_record_data
from rlkeep.storage import open_store
from rlkeep.sync.step import sync_logs_step, sync_traces_step
from tests.support.faultproxy import FaultProxy

SETTINGS = {"workers": 8, "max_inflight_mb": 4, "skip_policy": {"max_missing_after_listing": 0},
            "exclude": [{"pattern": "*.pane", "min_bytes": 50_000, "reason": "large_pane"}]}


def trace_tree(n_trials: int) -> dict[str, bytes]:
    tree: dict[str, bytes] = {}
    for i in range(n_trials):
        trial = f"task-{i % 17:03d}__{i:07d}"
        tree[f"{trial}/config.json"] = json.dumps({"trial": trial}).encode()
        tree[f"{trial}/agent/trajectory.json"] = os.urandom(200 + i % 900)
        if i % 5:
            tree[f"{trial}/result.json"] = json.dumps({"trial_name": trial, "reward": i % 2}).encode()
        if i % 50 == 0:
            tree[f"{trial}/agent/terminus_2.pane"] = b"\x1b[0m$ " * (20_000 if i % 100 == 0 else 10)
    return tree


def put_all(store, tree: dict[str, bytes], prefix: str = "") -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: store.put_bytes(prefix + kv[0], kv[1]), tree.items()))


def context(tmp_path: Path, bucket: str, *, scheduler: str = "none", settings: dict | None = None,
            outputs: dict | None = None) -> StepContext:
    data = {"job": "rl-demo", "user": "demo", "scheduler": scheduler, "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"],
            "store": f"s3://{bucket}/iris/rl-demo", "checkpoint": {"interval": 20}}
    if scheduler == "iris":
        data["cluster"] = "cw-test"
    record = validate_record_data(data, Path("records/rl-demo.yaml"))
    return StepContext(job="rl-demo", record=record, data_root=tmp_path, inputs={},
                       outputs=outputs or {"tar": tmp_path / "rl-demo/sync/trace_jobs.tar",
                                           "manifest": tmp_path / "rl-demo/sync/trace_jobs.manifest.json"},
                       settings=settings or SETTINGS)


def test_trace_sync_covers_every_page_and_is_byte_identical_on_rerun(tmp_path: Path, bucket: str) -> None:
    tree = trace_tree(400)  # > 1,000 objects: several listing pages
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    put_all(store, tree, "trace_jobs/")
    ctx = context(tmp_path, bucket)
    sync_traces_step(ctx)
    manifest = json.loads(ctx.outputs["manifest"].read_text())
    excluded = {k for k, v in tree.items() if k.endswith(".pane") and len(v) >= 50_000}
    assert manifest["objects_listed"] == len(tree) > 1000
    assert manifest["objects_synced"] == len(tree) - len(excluded)
    assert {s["key"] for s in manifest["objects_skipped"]} == excluded
    assert all(s["reason"] == "large_pane" for s in manifest["objects_skipped"])
    assert manifest["bytes"] == sum(len(v) for k, v in tree.items() if k not in excluded)
    assert manifest["trials_started"] == 400 and manifest["trials_completed"] == 320
    tar_bytes = ctx.outputs["tar"].read_bytes()
    assert manifest["sha256"] == hashlib.sha256(tar_bytes).hexdigest()
    with tarfile.open(ctx.outputs["tar"]) as tar:
        names = tar.getnames()
        assert names == sorted(set(tree) - excluded, key=str.encode)
        member = tar.extractfile(names[0])
        assert member is not None and member.read() == tree[names[0]]
    listing = subprocess.run(["tar", "-tf", str(ctx.outputs["tar"])], capture_output=True, text=True, check=True)
    assert "task-001__0000001/result.json" in listing.stdout.splitlines()

    sync_traces_step(ctx)
    assert hashlib.sha256(ctx.outputs["tar"].read_bytes()).hexdigest() == manifest["sha256"]


def test_transient_faults_mid_transfer_give_the_identical_tar(tmp_path: Path, bucket: str, s3_server, monkeypatch) -> None:
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    put_all(store, trace_tree(60), "trace_jobs/")
    clean = context(tmp_path / "clean", bucket)
    sync_traces_step(clean)
    faulty = context(tmp_path / "faulty", bucket)
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        proxy.fail_next("reset", 2, method="GET", path_contains="trajectory")
        proxy.fail_next("truncate", 2, method="GET", path_contains="result.json")
        proxy.fail_next("slowdown", 2, method="GET", path_contains="config.json")
        sync_traces_step(faulty)
        assert proxy.faults_injected() == 6
    assert faulty.outputs["tar"].read_bytes() == clean.outputs["tar"].read_bytes()


def test_vanished_object_is_recorded_and_fails_by_policy(tmp_path: Path, bucket: str, monkeypatch) -> None:
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    tree = trace_tree(10)
    put_all(store, tree, "trace_jobs/")
    victim = sorted(tree)[3]
    import rlkeep.tarstream as tarstream

    original = tarstream.fetch_in_order

    def delete_then_fetch(st, infos, **kwargs):
        store.delete([f"trace_jobs/{victim}"])
        return original(st, infos, **kwargs)

    monkeypatch.setattr(tarstream, "fetch_in_order", delete_then_fetch)
    ctx = context(tmp_path, bucket)
    with pytest.raises(RlkeepError, match=rf"1 objects vanished between listing and fetch \(allowed: 0\), e.g. {victim}"):
        sync_traces_step(ctx)
    assert not ctx.outputs["tar"].exists() and not ctx.outputs["manifest"].exists()
    assert list(ctx.outputs["tar"].parent.iterdir()) == []  # no partial tar left behind

    store.put_bytes(f"trace_jobs/{victim}", tree[victim])
    lenient = context(tmp_path, bucket, settings={**SETTINGS, "skip_policy": {"max_missing_after_listing": 1}})
    sync_traces_step(lenient)
    manifest = json.loads(lenient.outputs["manifest"].read_text())
    assert {"key": victim, "size": len(tree[victim]), "reason": "missing_after_listing"} in manifest["objects_skipped"]


def test_logs_sync_keeps_informative_artifacts_and_never_weights(tmp_path: Path, bucket: str) -> None:
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    informative = {
        "logs/rl-demo.out": b"Step 1: \n{'trainer/global_step': 1}\n",
        "logs/rl-demo-r1.out": b"WANDB_MIRROR kind=train step=2 metrics={}\n",
        "ray/rl-demo/session_1/logs/raylet.out": b"raylet up\n",
        "vllm/rl-demo.log": b"Avg prompt throughput: 10 tokens/s\n",
        "config/rl-demo/resolved_config.yaml": b"trainer:\n  ckpt_interval: 20\n",
        "wandb/run-1/files/output.log": b"wandb\n",
        "ckpts/latest_ckpt_global_step.txt": b"40",
        "ckpts/global_step_40/policy/fsdp_config.json": b'{"world_size": 2}',
    }
    excluded = {
        "ckpts/global_step_40/policy/model_world_size_2_rank_0.pt": "excluded_weights",
        "exports/global_step_40/policy/model.safetensors": "excluded_weights",
        "core.12345": "excluded_core_dump",
        "tools/__pycache__/x.cpython-311.pyc": "excluded_cache",
    }
    put_all(store, informative)
    put_all(store, {k: b"\x00" * 64 for k in excluded})
    put_all(store, {"trace_jobs/t__1/result.json": b"{}"})
    ctx = context(tmp_path, bucket, outputs={"tar": tmp_path / "logs.tar", "manifest": tmp_path / "logs.manifest.json"})
    sync_logs_step(ctx)
    manifest = json.loads(ctx.outputs["manifest"].read_text())
    with tarfile.open(ctx.outputs["tar"]) as tar:
        names = tar.getnames()
        trainer = tar.extractfile("attempts/rl-demo-r1/trainer.log")
        assert trainer is not None and trainer.read() == informative["logs/rl-demo-r1.out"]
    assert names[:2] == ["attempts/rl-demo/trainer.log", "attempts/rl-demo-r1/trainer.log"]
    assert set(names[2:]) == {f"store/{k}" for k in informative}
    assert {s["key"]: s["reason"] for s in manifest["objects_skipped"]} == excluded
    assert [a["attempt"] for a in manifest["attempts"]] == ["rl-demo", "rl-demo-r1"]
    assert not any("trace_jobs" in name for name in names)


def test_logs_sync_takes_full_logs_from_iris(tmp_path: Path, bucket: str, iris, monkeypatch) -> None:
    monkeypatch.setenv("IRIS_STANDIN_VERSION", "d")  # a CLI that can prove a log complete (head == tail)
    lines = [f"[17:05:{i % 60:02d}] task=/demo/rl-demo/0 | line {i}" for i in range(1500)]
    iris.write_state({"jobs": {"/demo/rl-demo": {"state": "failed", "log_lines": lines},
                               "/demo/rl-demo-r1": {"state": "succeeded", "log_lines": ["only line"]}}})
    open_store(f"s3://{bucket}/iris/rl-demo").put_bytes("vllm.log", b"x\n")
    ctx = context(tmp_path, bucket, scheduler="iris",
                  outputs={"tar": tmp_path / "logs.tar", "manifest": tmp_path / "logs.manifest.json"})
    sync_logs_step(ctx)
    with tarfile.open(ctx.outputs["tar"]) as tar:
        member = tar.extractfile("attempts/rl-demo/trainer.log")
        assert member is not None and member.read().decode().splitlines() == lines
    manifest = json.loads(ctx.outputs["manifest"].read_text())
    assert manifest["attempts"][0]["lines"] == 1500 and manifest["attempts"][0]["source"] == "iris job logs /demo/rl-demo"
    assert manifest["attempts"][0]["completeness"]["status"] == "proven"


@pytest.mark.parametrize("version", ["a", "d", "f"])
def test_a_gone_attempt_without_a_store_copy_is_noted_and_a_lost_log_of_a_known_one_blocks(
        tmp_path: Path, bucket: str, iris, monkeypatch, version: str) -> None:
    """Retention deleted the first attempt and the store kept no log of it: nothing could ever bring
    that log back, so it is noted, not a blocker. The same loss for an attempt the controller still
    knows (a log cut by the server's cap, no store copy) blocks, naming the attempt, where the CLI
    can tell; a CLI that fetches one end only keeps what it gave and says it is unproven."""
    monkeypatch.setenv("IRIS_STANDIN_VERSION", version)
    monkeypatch.setenv("IRIS_STANDIN_SERVER_MAX_LINES", "10")  # the server clamps silently
    iris.write_state({"jobs": {"/demo/rl-demo": {"state": "failed", "deleted": True, "log_lines": ["gone"]},
                               "/demo/rl-demo-r1": {"state": "succeeded", "log_lines": ["step 1"]}}})
    ctx = context(tmp_path, bucket, scheduler="iris",
                  outputs={"tar": tmp_path / "logs.tar", "manifest": tmp_path / "logs.manifest.json"})
    open_store(f"s3://{bucket}/iris/rl-demo").put_bytes("logs/rl-demo-r1.out", b"step 1\n")
    sync_logs_step(ctx)
    first, second = json.loads(ctx.outputs["manifest"].read_text())["attempts"]
    assert first["attempt"] == "rl-demo" and first["member"] is None
    assert first["completeness"]["status"] == "unavailable" and "gone from the controller" in first["note"]
    assert second["member"] == "attempts/rl-demo-r1/trainer.log"

    iris.write_state({"jobs": {"/demo/rl-demo": {"state": "failed", "log_lines": [f"line {i}" for i in range(50)]},
                               "/demo/rl-demo-r1": {"state": "succeeded", "log_lines": ["step 1"]}}})
    ctx.outputs["tar"].unlink()
    ctx.outputs["manifest"].unlink()
    if version == "f":  # one end only: kept, and the manifest says it is not proven whole
        sync_logs_step(ctx)
        first = json.loads(ctx.outputs["manifest"].read_text())["attempts"][0]
        assert first["completeness"]["status"] == "unproven" and first["lines"] == 10
        return
    with pytest.raises(RlkeepError, match=r"trainer log of attempt rl-demo \(/demo/rl-demo\) cannot be read whole"):
        sync_logs_step(ctx)
    assert not ctx.outputs["manifest"].exists()


def test_empty_trace_prefix_is_a_clear_error(tmp_path: Path, bucket: str) -> None:
    with pytest.raises(RlkeepError, match=r"trace_jobs: no trace objects under this prefix"):
        sync_traces_step(context(tmp_path, bucket))


def test_transfer_policy_stops_an_oversized_sync_unless_allowed_for_this_job(tmp_path: Path, bucket: str) -> None:
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    tree = trace_tree(5)
    put_all(store, tree, "trace_jobs/")
    total = sum(len(v) for v in tree.values())
    ctx = context(tmp_path, bucket, settings={**SETTINGS, "exclude": []})
    ctx.config = {"policy": {"max_transfer_bytes": total - 1}}
    with pytest.raises(RlkeepError, match=rf"{total:,} bytes is over policy.max_transfer_bytes = {total - 1:,}.*"
                                          r"--config allow_transfer=rl-demo"):
        sync_traces_step(ctx)
    assert not ctx.outputs["tar"].exists()
    ctx.config["allow_transfer"] = "another-job"
    with pytest.raises(RlkeepError, match="over policy.max_transfer_bytes"):
        sync_traces_step(ctx)
    ctx.config["allow_transfer"] = "rl-demo"
    sync_traces_step(ctx)
    assert json.loads(ctx.outputs["manifest"].read_text())["objects_synced"] == len(tree)


def test_cross_region_transfer_needs_the_allowance() -> None:
    from rlkeep.regions import Region
    from rlkeep.regions import check_transfer

    def ends(source: str | None, dest: str) -> dict[str, Region]:
        return {"source": Region(source, "test"), "dest": Region(dest, "test")}

    ctx = StepContext(job="j", record=None, data_root=Path("."), inputs={}, outputs={},  # type: ignore[arg-type]
                      config={"policy": {"max_transfer_bytes": 10**12}})
    check_transfer(ctx, nbytes=10, what="x", **ends("us-east-02a", "us-east-02a"))
    check_transfer(ctx, nbytes=10, what="x", **ends(None, "us-west"))
    with pytest.raises(RlkeepError, match=r"crosses regions \(us-east-02a -> rno2a\)"):
        check_transfer(ctx, nbytes=10, what="x", **ends("us-east-02a", "rno2a"))
    ctx.config["allow_transfer"] = "j"
    check_transfer(ctx, nbytes=10, what="x", **ends("us-east-02a", "rno2a"))


def test_an_empty_or_traceback_only_trainer_log_is_preserved_with_its_state(tmp_path: Path, bucket: str) -> None:
    traceback = b"Traceback (most recent call last):\n  File \"main.py\", line 3\nRuntimeError: CUDA error\n"
    store = open_store(f"s3://{bucket}/iris/rl-demo")
    put_all(store, {"logs/rl-demo.out": b"", "logs/rl-demo-r1.out": traceback})
    chain = tmp_path / "rl-demo/chain.json"
    chain.parent.mkdir(parents=True)
    chain.write_text(json.dumps({"status": "completed", "attempts": [
        {"slug": "rl-demo", "id": "/demo/rl-demo", "state": "failed"},
        {"slug": "rl-demo-r1", "id": "/demo/rl-demo-r1", "state": "killed"}]}))
    ctx = context(tmp_path, bucket, outputs={"tar": tmp_path / "logs.tar", "manifest": tmp_path / "logs.manifest.json"})
    ctx.inputs["chain"] = chain
    sync_logs_step(ctx)
    with tarfile.open(ctx.outputs["tar"]) as tar:
        assert tar.getmember("attempts/rl-demo/trainer.log").size == 0
        member = tar.extractfile("attempts/rl-demo-r1/trainer.log")
        assert member is not None and member.read() == traceback
    manifest = json.loads(ctx.outputs["manifest"].read_text())
    assert [(a["attempt"], a["state"], a["bytes"], a["lines"], a["sha256"]) for a in manifest["attempts"]] == [
        ("rl-demo", "failed", 0, 0, hashlib.sha256(b"").hexdigest()),
        ("rl-demo-r1", "killed", len(traceback), 3, hashlib.sha256(traceback).hexdigest())]


@pytest.mark.parametrize("name", ["a", "task-0001__0000001/agent/trajectory.json", "x" * 100, "d/" * 60 + "e.json",
                                  "f" * 101, "ünï/cødé.txt", "g/" * 150 + "h"])
def test_tar_member_headers_read_back_and_match_tarfile_for_short_names(name: str) -> None:
    from rlkeep.tarstream import member_header, tar_member

    for size in (0, 1, 511, 512, 50_000):
        header = member_header(name, size)
        if len(name) <= 100 and name.isascii():  # the usual key: the very bytes tarfile's PAX format writes
            assert header == tar_member(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        archive = header + b"\0" * (size + (-size % 512)) + b"\0" * 1024
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            member = tar.next()
            assert member is not None and (member.name, member.size, member.mode, member.mtime) == (name, size, 0o644, 0)
