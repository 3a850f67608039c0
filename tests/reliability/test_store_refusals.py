"""A credential scoped to a sub-tree: the store lists the whole prefix but refuses (HTTP 403) the
reads of part of it. The real S3 server behind the fault proxy, which answers 403 AccessDenied
(with the principal in the message, as AWS words it) for every GET under the denied sub-tree.

Guard proven: tarstream.refuse_denied (fed by storage.ObjectDenied for a 403 read). Without it the
denied objects are dropped as if absent and a tar + manifest are published short of them: the
"nothing half-synced" assertions below fail. Without the ObjectDenied mapping the first 403 aborts
the sync naming one key, and the count / identity assertions fail.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.records import validate_record_data
from rlkeep.storage import open_store
from rlkeep.sync.step import sync_logs_step, sync_traces_step
from tests.support.faultproxy import DENIED_PRINCIPAL, FaultProxy

ROOT = "iris/job"
AREA = {"traces": "trace_jobs", "logs": "outputs"}  # sync_logs takes everything but the trace tree


def context(bucket: str, out: Path, step: str) -> StepContext:
    record = validate_record_data({"job": "job", "user": "u", "scheduler": "none", "chain": ["/u/job"],
                                   "store": f"s3://{bucket}/iris/job", "checkpoint": {"interval": 20}},
                                  Path("records/job.yaml"))
    names = {"traces": "trace_jobs", "logs": "logs"}
    return StepContext(job="job", record=record, data_root=out, inputs={},
                       outputs={"tar": out / f"{names[step]}.tar", "manifest": out / f"{names[step]}.manifest.json"},
                       settings={"workers": 4, "max_inflight_mb": 8, "skip_policy": {}})


def seed(bucket: str, step: str) -> tuple[list[str], list[str]]:
    store = open_store(f"s3://{bucket}/{ROOT}/{AREA[step]}")
    open_store(f"s3://{bucket}/{ROOT}").put_bytes("logs/job.out", b"step 1\n")  # the attempt's trainer log
    allowed = [f"task-a{i:02d}__x/result.json" for i in range(20)]
    denied = [f"task-b{i:02d}__y/agent/trajectory.json" for i in range(12)]
    for key in allowed + denied:
        store.put_bytes(key, os.urandom(200))
    return allowed, denied


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.parametrize("step", ["traces", "logs"])
def test_reads_refused_on_part_of_the_prefix_fail_naming_the_keys_and_the_credential(
        bucket: str, s3_server, monkeypatch, tmp_path: Path, step: str) -> None:
    allowed, denied = seed(bucket, step)
    out = tmp_path / "sync"
    run = sync_traces_step if step == "traces" else sync_logs_step
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        proxy.fail_next("forbidden", 10**9, method="GET", path_contains="/task-b")
        with pytest.raises(RlkeepError) as refused:
            run(context(bucket, out, step))
        refusals = sum(1 for _, _, outcome in proxy.log if outcome == "forbidden")
    message = str(refused.value)
    prefix = "" if step == "traces" else f"{AREA[step]}/"  # keys as listed, relative to the synced prefix
    assert f"refused {len(denied)} of the listed objects (HTTP 403 AccessDenied)" in message, message
    assert all(prefix + key in message for key in denied[:5]), message
    assert prefix + denied[5] not in message and f"and {len(denied) - 5} more" in message, message
    assert f"access key id {s3_server.access_key}" in message and DENIED_PRINCIPAL in message, message
    assert s3_server.secret_key not in message and "Signature" not in message, message
    assert refusals == len(denied)  # a refusal is not retried: asking again gets the same answer
    # Nothing half-synced: no tar, no manifest, no temporary file for a later step to take as done.
    assert files_in(out) == []

    # Once the credential may read the whole prefix, the same step completes with every object.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    run(context(bucket, out, step))
    assert sorted(files_in(out)) == sorted([f"{'trace_jobs' if step == 'traces' else 'logs'}.tar",
                                            f"{'trace_jobs' if step == 'traces' else 'logs'}.manifest.json"])
