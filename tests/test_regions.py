"""Cross-region reads from the store into the data root: the syncs compare the store's region with
policy.local_region, refuse a crossing without allow_transfer=<job>, and log what is unknown."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.records import validate_record_data
from rlkeep.regions import Region, local_region, store_to_local
from rlkeep.storage import open_store
from rlkeep.sync.step import sync_traces_step

SETTINGS = {"workers": 4, "max_inflight_mb": 4, "skip_policy": {"max_missing_after_listing": 0}, "exclude": []}


def context(tmp_path: Path, bucket: str, *, store_region: str | None, config: dict) -> StepContext:
    data = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo"],
            "store": f"s3://{bucket}/iris/rl-demo", "checkpoint": {"interval": 20}}
    if store_region:
        data["store_region"] = store_region
    record = validate_record_data(data, Path("records/rl-demo.yaml"))
    return StepContext(job="rl-demo", record=record, data_root=tmp_path, inputs={},
                       outputs={"tar": tmp_path / "trace_jobs.tar", "manifest": tmp_path / "trace_jobs.manifest.json"},
                       settings=SETTINGS, config={"policy": {"max_transfer_bytes": 0}, **config})


def test_a_sync_across_regions_is_refused_before_any_read_unless_allowed(tmp_path: Path, bucket: str) -> None:
    open_store(f"s3://{bucket}/iris/rl-demo").put_bytes("trace_jobs/t__1/result.json", b'{"reward": 1}')
    ctx = context(tmp_path, bucket, store_region="us-east-02a",
                  config={"policy": {"max_transfer_bytes": 0, "local_region": "rno2a"}})
    with pytest.raises(RlkeepError, match=r"trace sync from .*crosses regions \(us-east-02a -> rno2a\): source region "
                                          r"from record field store_region, destination region from config "
                                          r"policy.local_region; nothing was transferred"):
        sync_traces_step(ctx)
    assert not ctx.outputs["tar"].exists() and not ctx.outputs["manifest"].exists()
    ctx.config["allow_transfer"] = "rl-demo"
    sync_traces_step(ctx)
    assert json.loads(ctx.outputs["manifest"].read_text())["objects_synced"] == 1


def test_without_a_local_region_nothing_is_compared_and_the_log_says_so(tmp_path: Path, bucket: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    open_store(f"s3://{bucket}/iris/rl-demo").put_bytes("trace_jobs/t__1/result.json", b'{"reward": 1}')
    ctx = context(tmp_path, bucket, store_region="us-east-02a", config={})
    assert local_region(ctx.config) == Region(None, "config policy.local_region is not set")
    with caplog.at_level("INFO", logger="rlkeep"):
        sync_traces_step(ctx)
    assert "regions not compared: destination region unknown (config policy.local_region is not set)" in caplog.text


def test_the_store_is_asked_only_when_there_is_something_to_compare_with(tmp_path: Path, bucket: str) -> None:
    unknown_local = store_to_local(context(tmp_path, bucket, store_region=None, config={}))
    assert unknown_local["source"].name is None and "not asked of the store" in unknown_local["source"].source
    known_local = store_to_local(context(tmp_path, bucket, store_region=None,
                                         config={"policy": {"max_transfer_bytes": 0, "local_region": "rno2a"}}))
    # SeaweedFS answers GetBucketLocation empty: unknown, never read as us-east-1
    assert known_local["source"] == Region(None, f"the record declares no store_region and GetBucketLocation of "
                                                 f"bucket {bucket} answered empty")


def test_the_archive_copy_asks_the_store_only_when_the_destination_region_is_known() -> None:
    from rlkeep.regions import store_to_archive

    asked: list[str] = []

    def ask(url: str) -> tuple[str | None, str]:
        asked.append(url)
        return ("eu-west-1", "GetBucketLocation of bucket archives") if "archives" in url else (None, "answered empty")

    def record(**extra):
        data = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo"],
                "store": "s3://runs/iris/rl-demo", "checkpoint": {"interval": 20}, **extra}
        return validate_record_data(data, Path("records/rl-demo.yaml"))

    regions = store_to_archive(record(archive={"dest": "file:///srv/archives"}), ask=ask)
    assert asked == [] and not regions["source"].known and not regions["dest"].known
    regions = store_to_archive(record(archive={"dest": "s3://archives/rl"}, store_region="us-east-02a"), ask=ask)
    assert asked == ["s3://archives/rl"]
    assert regions == {"source": Region("us-east-02a", "record field store_region"),
                       "dest": Region("eu-west-1", "GetBucketLocation of bucket archives")}
