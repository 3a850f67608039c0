"""Reclaim: the decision (authority x sentinels), the plan (manifest keys only), journaled deletes on real S3."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkeep.errors import RlkeepError
from rlkeep.records import validate_record_data
from rlkeep.pipeline import verify_sentinels
from rlkeep.reclaim import execute_reclaim, plan_reclaim, reclaim_decision
from rlkeep.context import StepContext
from rlkeep.storage import open_store
from rlkeep.sync.step import sync_logs_step, sync_traces_step

SYNC_SETTINGS = {"workers": 16, "max_inflight_mb": 4, "skip_policy": {"max_missing_after_listing": 0},
                 "exclude": [{"pattern": "*.pane", "min_bytes": 1000, "reason": "large_pane"}]}


# --------------------------------------------------------------------------- the decision

RL_SENTINELS = verify_sentinels("rl")  # the step table's verify column, rl's rows
SENTINEL_VALUES = st.one_of(
    st.none(),
    st.sampled_from([{"status": "completed"}, {"status": "not_applicable", "reason": "no destination"},
                     {"status": "failed"}, {"status": "COMPLETED"}, {}, {"state": "completed"}]),
    st.sampled_from(["completed", 1, ["completed"]]),
)


@settings(max_examples=200, deadline=None)
@given(
    authorized=st.one_of(st.booleans(), st.sampled_from(["yes", 1, None])),
    sentinels=st.dictionaries(st.sampled_from(RL_SENTINELS + ("extra",)), SENTINEL_VALUES),
)
def test_never_acts_without_authority_and_every_sentinel(authorized, sentinels) -> None:
    acts, reason = reclaim_decision(authorized=authorized, verify_sentinels=sentinels, required=RL_SENTINELS)
    every_present = all(
        isinstance(sentinels.get(name), dict) and sentinels[name].get("status") in {"completed", "not_applicable"}
        for name in set(RL_SENTINELS) | set(sentinels)
    )
    assert acts == (authorized is True and every_present)
    assert reason
    if authorized is not True:
        assert not acts and "not authorized" in reason and "reclaim_authorized" in reason
    for name in RL_SENTINELS:
        if sentinels.get(name) is None:
            assert not acts and f"verify/{name}.json" in reason


def test_decision_reasons_name_what_is_missing() -> None:
    ok = {"status": "completed"}
    assert RL_SENTINELS == ("model_upload", "traces", "model", "archive", "restore")
    assert verify_sentinels("sft") == ("archive", "restore")
    every = {"model_upload": ok, "traces": {"status": "not_applicable"}, "model": ok, "archive": ok, "restore": ok}
    assert reclaim_decision(authorized=True, verify_sentinels=every, required=RL_SENTINELS) == (
        True, "authorized for this job and verified: model_upload completed, traces not_applicable, model completed, "
              "archive completed, restore completed")
    acts, reason = reclaim_decision(authorized=True, verify_sentinels={"model": ok, "traces": None},
                                    required=RL_SENTINELS)
    assert not acts and reason == ("verify sentinel missing: verify/model_upload.json, verify/traces.json, "
                                   "verify/archive.json, verify/restore.json")
    # the archive verified but its restore never rehearsed: no reclamation
    acts, reason = reclaim_decision(authorized=True, verify_sentinels={**every, "restore": None},
                                    required=RL_SENTINELS)
    assert not acts and reason == "verify sentinel missing: verify/restore.json"
    acts, reason = reclaim_decision(authorized=False, verify_sentinels=every, required=RL_SENTINELS)
    assert not acts and reason.startswith("reclamation is not authorized for this job")


# --------------------------------------------------------------------------- a synced run on the real S3 server


def record_for(bucket: str, job: str = "rl-demo"):
    data = {"job": job, "user": "demo", "scheduler": "none", "chain": [f"/demo/{job}", f"/demo/{job}-r1"],
            "store": f"s3://{bucket}/iris/{job}", "checkpoint": {"interval": 20}}
    return validate_record_data(data, Path(f"records/{job}.yaml"))


def seed_run(store, trials: int = 12) -> dict[str, bytes]:
    tree = {
        "logs/rl-demo.out": b"step 1 reward 0.1\n",
        "logs/rl-demo-r1.out": b"step 2 reward 0.2\n",
        "ckpts/latest_ckpt_global_step.txt": b"20",
        "ckpts/global_step_20/model_world_size_1_rank_0.pt": b"\x00" * 300,
        "ckpts/global_step_20/huggingface/config.json": b"{}",
        "exports/global_step_20/policy/model.safetensors": b"\x01" * 200,
    }
    for i in range(trials):
        tree[f"trace_jobs/task__{i:04d}/result.json"] = json.dumps({"reward": i % 2}).encode()
        tree[f"trace_jobs/task__{i:04d}/agent/trajectory.json"] = b"[]" * (i + 1)
    tree["trace_jobs/task__0000/agent/terminus_2.pane"] = b"$ " * 1000  # skipped by the sync: still ours
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: store.put_bytes(*item), tree.items()))
    return tree


def synced_manifests(tmp_path: Path, record) -> dict[str, dict]:
    manifests = {}
    for name, step, stem in (("logs", sync_logs_step, "logs"), ("traces", sync_traces_step, "trace_jobs")):
        outputs = {"tar": tmp_path / f"sync/{stem}.tar", "manifest": tmp_path / f"sync/{stem}.manifest.json"}
        step(StepContext(job=record.job, record=record, data_root=tmp_path, inputs={}, outputs=outputs,
                         settings=SYNC_SETTINGS))
        manifests[name] = json.loads(outputs["manifest"].read_text())
    return manifests


def bucket_keys(bucket: str) -> set[str]:
    return {info.key for info in open_store(f"s3://{bucket}").list()}


def test_reclaim_deletes_exactly_the_planned_keys(tmp_path: Path, bucket: str) -> None:
    record = record_for(bucket)
    store = open_store(record.store)
    tree = seed_run(store)
    manifests = synced_manifests(tmp_path, record)
    # Written after the sync: not ours to delete. Siblings share the bucket (and a string prefix).
    store.put_bytes("trace_jobs/task__9999/result.json", b"{}")
    store.put_bytes("ckpts/global_step_40/model_world_size_1_rank_0.pt", b"\x00" * 10)
    store.put_bytes("trace_jobs/task__0003/result.json", b'{"reward": 1, "rewritten": true}')  # other size now
    siblings = open_store(f"s3://{bucket}/iris")
    for key in ("other-job/trace_jobs/t/result.json", "rl-demo-r1/logs/x.out", "rl-demo2/ckpts/a.pt"):
        siblings.put_bytes(key, b"sibling")

    plan = plan_reclaim(record, manifests)
    assert [o["key"] for o in plan["objects"]] == sorted(tree)
    assert {o["key"]: o["size"] for o in plan["objects"]} == {k: len(v) for k, v in tree.items()}
    assert plan["bytes"] == sum(len(v) for v in tree.values())
    assert plan["manifests"] == {"logs": 6, "traces": len(tree) - 6}

    result = execute_reclaim(plan, tmp_path / "reclaim.journal.json", batch_size=7)
    changed = "trace_jobs/task__0003/result.json"
    assert result["deleted_keys"] == len(tree) - 1
    assert result["deleted_bytes"] == sum(len(v) for k, v in tree.items() if k != changed)
    assert result["missing"] == []
    assert result["kept_changed"] == [{"key": changed, "synced_size": len(tree[changed]),
                                       "size_now": len(b'{"reward": 1, "rewritten": true}')}]
    assert bucket_keys(bucket) == {
        "iris/rl-demo/trace_jobs/task__9999/result.json",
        "iris/rl-demo/ckpts/global_step_40/model_world_size_1_rank_0.pt",
        f"iris/rl-demo/{changed}",
        "iris/other-job/trace_jobs/t/result.json", "iris/rl-demo-r1/logs/x.out", "iris/rl-demo2/ckpts/a.pt",
    }


class SimulatedKill(Exception):
    pass


def test_a_killed_reclaim_resumes_from_its_journal(tmp_path: Path, bucket: str) -> None:
    record = record_for(bucket)
    store = open_store(record.store)
    tree = seed_run(store, trials=10)
    plan = plan_reclaim(record, synced_manifests(tmp_path, record))
    journal = tmp_path / "reclaim.journal.json"

    def kill_after_two(state: dict) -> None:
        if state["batches_done"] == 2:
            raise SimulatedKill()

    with pytest.raises(SimulatedKill):
        execute_reclaim(plan, journal, batch_size=5, progress=kill_after_two)
    state = json.loads(journal.read_text())
    assert state["batches_done"] == 2 and state["deleted_keys"] == 10 and not state["finished"]
    planned = [o["key"] for o in plan["objects"]]
    assert {k.removeprefix("iris/rl-demo/") for k in bucket_keys(bucket)} == set(planned[10:])
    # The kill came mid-batch: the store already dropped two keys of batch 3, the journal never heard.
    store.delete(planned[10:12])

    result = execute_reclaim(plan, journal, batch_size=5)
    assert result["missing"] == planned[10:12]
    assert result["deleted_keys"] == len(tree) - 2
    assert result["deleted_bytes"] == sum(len(tree[k]) for k in planned if k not in planned[10:12])
    assert bucket_keys(bucket) == set()
    assert execute_reclaim(plan, journal, batch_size=5) == result  # finished: a rerun changes nothing

    with pytest.raises(RlkeepError, match="field 'batch_size' is 5, this plan has 7"):
        execute_reclaim(plan, journal, batch_size=7)


def test_a_journal_of_another_plan_or_an_edited_plan_is_refused(tmp_path: Path, bucket: str) -> None:
    record = record_for(bucket)
    seed_run(open_store(record.store), trials=2)
    plan = plan_reclaim(record, synced_manifests(tmp_path, record))
    journal = tmp_path / "journal.json"
    journal.write_text(json.dumps({"plan_id": "0" * 64, "store": plan["store"], "batch_size": 1000}))
    with pytest.raises(RlkeepError, match="journal.json: reclaim journal field 'plan_id'"):
        execute_reclaim(plan, journal)
    edited = {**plan, "objects": plan["objects"] + [{"key": "zz/not-ours", "size": 1}]}
    with pytest.raises(RlkeepError, match="plan_id does not match its objects"):
        execute_reclaim(edited, tmp_path / "fresh.json")
    assert len(bucket_keys(bucket)) == len(plan["objects"])  # nothing deleted


# --------------------------------------------------------------------------- the plan: bad input, no store calls


def manifest(source: str, objects: list[tuple[str, int]], skipped: list[tuple[str, int]] = ()) -> dict:
    return {"status": "completed", "source": source, "objects_listed": len(objects) + len(skipped),
            "objects_synced": len(objects), "objects": [{"key": k, "size": s, "sha256": "x"} for k, s in objects],
            "objects_skipped": [{"key": k, "size": s, "reason": "excluded_weights"} for k, s in skipped]}


def test_the_plan_needs_no_store_access(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens: any call would fail
    record = record_for("bucket")
    plan = plan_reclaim(record, {
        "logs": manifest("s3://bucket/iris/rl-demo", [("logs/a.out", 3)], [("ckpts/global_step_2/m.pt", 5)]),
        "traces": manifest("s3://bucket/iris/rl-demo/trace_jobs/", [("t1/result.json", 2)]),
    })
    assert [(o["key"], o["size"]) for o in plan["objects"]] == [
        ("ckpts/global_step_2/m.pt", 5), ("logs/a.out", 3), ("trace_jobs/t1/result.json", 2)]
    assert plan["store"] == "s3://bucket/iris/rl-demo" and plan["bytes"] == 10 and plan["keys"] == 3


@pytest.mark.parametrize(("manifests", "message"), [
    ({"logs": manifest("s3://bucket/iris/other-job", [("a", 1)])}, r"field 'source' is 's3://bucket/iris/other-job'; expected s3://bucket/iris/rl-demo"),
    ({"traces": manifest("s3://bucket/iris/rl-demo", [("a", 1)])}, r"traces sync manifest: field 'source'.*expected s3://bucket/iris/rl-demo/trace_jobs"),
    ({"logs": manifest("s3://bucket/iris/rl-demo", [("../other-job/a", 1)])}, r"objects\[0\].*refusing object key '../other-job/a'"),
    ({"logs": manifest("s3://bucket/iris/rl-demo", [("a", -1)])}, r"field 'objects\[0\].size' is -1 for key 'a'"),
    ({"logs": {**manifest("s3://bucket/iris/rl-demo", [("a", 1)]), "objects_listed": 5}}, "field 'objects_listed' is 5"),
    ({"logs": {**manifest("s3://bucket/iris/rl-demo", [("a", 1)]), "status": "not_applicable"}}, "field 'status'"),
    ({"logs": {k: v for k, v in manifest("s3://bucket/iris/rl-demo", [("a", 1)]).items() if k != "objects_skipped"}},
     "field 'objects_skipped' is missing"),
    ({"ckpts": manifest("s3://bucket/iris/rl-demo", [("a", 1)])}, r"unknown manifest name\(s\) \['ckpts'\]"),
    ({}, "no sync manifests given"),
])
def test_bad_manifests_fail_naming_the_field(manifests: dict, message: str) -> None:
    with pytest.raises(RlkeepError, match=message):
        plan_reclaim(record_for("bucket"), manifests)


def test_reclaim_on_a_file_store_touches_only_planned_files(tmp_path: Path) -> None:
    root = tmp_path / "store"
    data = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo"],
            "store": f"file://{root}/iris/rl-demo", "checkpoint": {"interval": 20}}
    record = validate_record_data(data, Path("records/rl-demo.yaml"))
    for key, body in {"iris/rl-demo/logs/rl-demo.out": b"log", "iris/rl-demo/ckpts/global_step_2/m.pt": b"12345",
                      "iris/rl-demo/late.txt": b"late", "iris/rl-demo-r1/logs/x.out": b"sibling"}.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    plan = plan_reclaim(record, {"logs": manifest(record.store, [("logs/rl-demo.out", 3), ("logs/gone.out", 4)],
                                                  [("ckpts/global_step_2/m.pt", 5)])})
    result = execute_reclaim(plan, tmp_path / "journal.json")
    assert (result["deleted_keys"], result["deleted_bytes"], result["missing"]) == (2, 8, ["logs/gone.out"])
    left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert left == ["iris/rl-demo-r1/logs/x.out", "iris/rl-demo/late.txt"]


# --------------------------------------------------------------------------- where every deleted object is preserved


def reclaim_context(tmp_path: Path, bucket: str, *, archive_trees: tuple[str, ...] = ("logs", "trace_jobs")):
    """A synced run on the real S3 server, its archive built and copied to s3://<bucket>/archives and
    verified by the real verify step, and publication sentinels as the publish steps write them."""
    from rlkeep.archive import build_archive, verify_archive_step

    data = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"],
            "store": f"s3://{bucket}/iris/rl-demo", "checkpoint": {"interval": 20},
            "archive": {"dest": f"s3://{bucket}/archives"}}
    record = validate_record_data(data, tmp_path / "records" / "rl-demo.yaml")
    tree = seed_run(open_store(record.store))
    synced_manifests(tmp_path, record)
    job = tmp_path / "rl-demo"
    tars = {"logs": tmp_path / "sync/logs.tar", "trace_jobs": tmp_path / "sync/trace_jobs.tar"}
    chain = job / "chain.json"
    chain.parent.mkdir(parents=True, exist_ok=True)
    chain.write_text("{}")
    build_archive(job / "archive/rl-demo_archive.tgz", job / "archive/MANIFEST",
                  sources=[(name, tars[name]) for name in archive_trees], extra_files=[("chain.json", chain)],
                  summary={"run": "rl-demo", "jobs": list(record.chain)})
    verify_archive_step(StepContext(
        job="rl-demo", record=record, data_root=tmp_path,
        inputs={"tgz": job / "archive/rl-demo_archive.tgz", "manifest": job / "archive/MANIFEST"},
        outputs={"verify": job / "verify/archive.json"}, settings={"dest": data["archive"]["dest"]},
        config={"policy": {"max_transfer_bytes": 0}}))
    # the real restore rehearsal: the archive read back from s3://<bucket>/archives, held to its sources
    from rlkeep.restore.step import rehearse_restore_step

    rehearse_restore_step(StepContext(
        job="rl-demo", record=record, data_root=tmp_path,
        inputs={"manifest": job / "archive/MANIFEST", "chain": chain,
                **{key: tars[name] for key, name in (("logs", "logs"), ("traces", "trace_jobs")) if name in archive_trees}},
        outputs={"verify": job / "verify/restore.json"}))
    sentinels = {"model_upload": {"status": "completed", "repo_id": "org/rl-demo", "commit": "c" * 40},
                 "model": {"status": "completed", "repo_id": "org/rl-demo", "commit": "a" * 40},
                 "traces": {"status": "completed", "repo_id": "org/rl-demo-traces", "commit": "b" * 40}}
    for name, sentinel in sentinels.items():
        (job / f"verify/{name}.json").write_text(json.dumps(sentinel))
    ctx = StepContext(
        job="rl-demo", record=record, data_root=tmp_path,
        inputs={"model_upload": job / "verify/model_upload.json", "model": job / "verify/model.json",
                "traces": job / "verify/traces.json", "archive": job / "verify/archive.json",
                "restore": job / "verify/restore.json", "logs_manifest": tmp_path / "sync/logs.manifest.json",
                "traces_manifest": tmp_path / "sync/trace_jobs.manifest.json",
                "archive_manifest": job / "archive/MANIFEST"},
        outputs={"reclaim": job / "reclaim.json"}, settings={"authorized": True})
    return ctx, tree


def test_reclaim_json_says_where_every_class_of_deleted_object_is_preserved(tmp_path: Path, bucket: str) -> None:
    from rlkeep.reclaim.step import reclaim_step

    ctx, tree = reclaim_context(tmp_path, bucket)
    reclaim_step(ctx)
    reclaim = json.loads(ctx.outputs["reclaim"].read_text())
    archive = json.loads(ctx.inputs["archive"].read_text())
    assert reclaim["status"] == "completed" and reclaim["deleted_keys"] == len(tree)
    classes = {entry["class"]: entry for entry in reclaim["preserved"]}
    assert sum(entry["keys"] for entry in classes.values()) == reclaim["deleted_keys"]
    assert sum(entry["bytes"] for entry in classes.values()) == reclaim["deleted_bytes"]

    logs = classes["logs_and_run_artifacts"]
    # logs/rl-demo.out, logs/rl-demo-r1.out; the archive's copy proven verified, then restored from its destination
    assert logs["keys"] == 2 and logs["proof"] == "verify/archive.json, verify/restore.json"
    copy = logs["preserved_in"]["archive"]
    assert copy["sha256"] == archive["local"]["sha256"] and copy["member_prefix"] == "logs/store/"
    assert {o["url"]: o["sha256"] for o in copy["remote"]} == {o["url"]: o["sha256"] for o in archive["remote"]["objects"]}

    traces = classes["trace_trees"]
    assert traces["keys"] == 24 and traces["proof"] == "verify/archive.json, verify/restore.json, verify/traces.json"
    assert traces["preserved_in"]["trace_dataset"]["commit"] == "b" * 40
    assert traces["preserved_in"]["archive"]["sha256"] == archive["local"]["sha256"]

    weights = classes["checkpoints_and_weights"]
    assert weights["keys"] == 4 and weights["proof"] == "verify/model.json"
    assert weights["preserved_in"]["model"]["commit"] == "a" * 40

    lost = classes["not_preserved"]  # the large pane the sync excluded: deleted, and said to be kept nowhere
    assert lost["keys"] == 1 and lost["reasons"] == {"large_pane": 1} and lost["preserved_in"] is None


def test_an_object_preserved_nowhere_provable_stops_reclaim_before_any_delete(tmp_path: Path, bucket: str) -> None:
    from rlkeep.reclaim.step import reclaim_step

    ctx, _ = reclaim_context(tmp_path, bucket)
    # a later sync lists an object the (verified) archive was never built from
    open_store(ctx.record.store).put_bytes("trace_jobs/task__0099/result.json", b'{"reward": 1}')
    synced_manifests(tmp_path, ctx.record)
    before = bucket_keys(bucket)
    with pytest.raises(RlkeepError, match=r"reclaim: 1 planned object\(s\) are preserved nowhere rlkeep can prove: "
                                          r"trace_jobs/task__0099/result.json \(archive member "
                                          r"trace_jobs/task__0099/result.json is not in the archive MANIFEST\); "
                                          r"nothing was deleted"):
        reclaim_step(ctx)
    assert bucket_keys(bucket) == before and not ctx.outputs["reclaim"].exists()


def test_a_later_rerun_without_authority_still_says_where_things_are_kept(tmp_path: Path, bucket: str) -> None:
    from rlkeep.reclaim.step import reclaim_step

    ctx, _ = reclaim_context(tmp_path, bucket)
    reclaim_step(ctx)
    first = json.loads(ctx.outputs["reclaim"].read_text())
    ctx.outputs["reclaim"].unlink()  # Snakemake removes the output before rerunning the rule
    ctx.settings["authorized"] = False
    reclaim_step(ctx)
    again = json.loads(ctx.outputs["reclaim"].read_text())
    assert again["reason"] == "reclaimed by an earlier authorized invocation"
    assert again["preserved"] == first["preserved"] and again["deleted_keys"] == first["deleted_keys"]


# --------------------------------------------------------------------------- awaiting authority, end to end


def test_done_without_authority_names_the_command_and_following_it_reclaims(data_root: Path, bucket: str,
                                                                               iris) -> None:
    """A run that reaches DONE without authority lists reclamation as remaining work with the
    command that grants it (DONE and REPORT.md); running that command, as printed, reclaims (issue 54)."""
    from tests.conftest import run_snakemake, seed_example

    job = "rl-demo"
    _, record = seed_example(data_root, bucket, iris, job=job)
    first = run_snakemake(data_root, f"{job}/DONE")
    assert first.returncode == 0, first.stderr[-3000:]
    done = json.loads((data_root / job / "DONE").read_text())
    work = {item["step"]: item for item in done["remaining_work"]}
    assert list(work) == ["reclaim"] and work["reclaim"]["status"] == "awaiting_authority"
    command = work["reclaim"]["command"]
    report = (data_root / job / "REPORT.md").read_text()
    assert "None." not in report.split("## Remaining work", 1)[1]
    assert f"Grant it with: `{command}`" in report
    store = open_store(record["store"])
    assert any(True for _ in store.list())

    words = command.split()  # run_snakemake gives this checkout's Snakefile and the test profile
    assert words[:2] == ["snakemake", "--profile"]
    granted = run_snakemake(data_root, *words[3:])
    assert granted.returncode == 0, granted.stderr[-3000:]
    reclaim = json.loads((data_root / job / "reclaim.json").read_text())
    assert reclaim["status"] == "completed" and reclaim["deleted_keys"] > 0
    after = json.loads((data_root / job / "DONE").read_text())
    assert after["reclaimed"]["keys"] == reclaim["deleted_keys"]
    assert after["remaining_work"] == []
    assert "## Remaining work\n\nNone." in (data_root / job / "REPORT.md").read_text()
