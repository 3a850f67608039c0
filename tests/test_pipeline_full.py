"""The whole pipeline on a generated run: S3 (SeaweedFS), the Hub server, the Iris stand-in.

These are the runbook's promises checked end to end: every preservation step completes, no
planted secret reaches the Hub or the archive destination, independent steps complete while
another is blocked, reclamation acts only under authority for exactly this job.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

from huggingface_hub import HfApi

from rlkeep.hub import TRACES_HEADING, TRACES_PENDING, dataset_links, markdown_section
from rlkeep.storage import open_store
from tests.conftest import REPO, run_snakemake, seed_example
from tests.support.hub import hub_server, stored_blobs  # noqa: F401 - fixture
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"


def archive_bytes(bucket: str) -> bytes:
    store = open_store(f"s3://{bucket}/archives")
    found = {info.key: store.read_bytes(info.key) for info in store.list()}
    assert f"{JOB}/{JOB}_archive.tgz" in found and f"{JOB}/MANIFEST" in found
    return gzip.decompress(found[f"{JOB}/{JOB}_archive.tgz"]) + found[f"{JOB}/MANIFEST"]


def hub_api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=hub.token)


def card_at(hub, repo_id: str, revision: str, scratch: Path) -> str:
    """README.md of the model repo at `revision`, read back from the Hub."""
    path = hub_api(hub).hf_hub_download(repo_id, "README.md", revision=revision, local_dir=scratch / revision)
    return Path(path).read_text()


def traces_links(card: str, hub) -> list[str]:
    """The datasets the card's Training Traces section links, each at the address of the Hub in use."""
    section = markdown_section(card, TRACES_HEADING)
    assert section is not None, card
    links = dataset_links(section)
    assert all(f"{hub.url}/datasets/{link}" in section for link in links), section
    return links


def model_history(hub, repo_id: str) -> list[str]:
    """Commit ids of main, newest first."""
    return [entry.commit_id for entry in hub_api(hub).list_repo_commits(repo_id)]


def blobs_at(hub, repo_id: str, revision: str) -> dict[str, str]:
    """path -> git blob id (or LFS sha256) of every file at `revision`."""
    return {entry.path: (entry.lfs.sha256 if entry.lfs else entry.blob_id)
            for entry in hub_api(hub).list_repo_tree(repo_id, revision=revision, recursive=True)
            if hasattr(entry, "blob_id")}


def ran_rules(result) -> set[str]:
    return {line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
            if line.strip().startswith(("rule ", "localrule "))}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_full_run_publishes_verifies_archives_and_leaks_nothing(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode == 0, result.stderr[-4000:]

    done = json.loads((data_root / JOB / "DONE").read_text())
    assert {status for status in done["steps"].values()} <= {"completed", "not_applicable"}
    assert done["steps"]["register"] == "completed" and done["steps"]["publish_model"] == "completed"
    assert done["steps"]["reclaim"] == "not_applicable"  # no authority given
    assert done["artifacts"] == {"weights": "present", "tokenizer_configuration": "present",
                                 "training_logs": "present", "training_traces_link": "present"}
    assert done["checkpoint"]["step"] in run.complete_ckpt_steps
    assert done["destinations"]["model_commit"] and done["destinations"]["traces_commit"]
    assert done["registration"]["status"] == "completed"
    # no reclaim authority given: reclamation is what is left
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]
    # The model went up with its trace link pending; one README-only commit linked the verified dataset.
    model, traces = record["publish"]["model"], record["publish"]["traces"]
    history = model_history(hub_server, model)
    verify = read_json(data_root / JOB / "verify" / "model.json")
    upload = read_json(data_root / JOB / "verify" / "model_upload.json")
    assert history[0] == verify["verified_commit"] == done["destinations"]["model_commit"]
    assert history[1] == upload["verified_commit"] == verify["upload_commit"]
    scratch = data_root.parent / "cards"
    assert traces_links(card_at(hub_server, model, history[0], scratch), hub_server) == [traces]
    uploaded_card = card_at(hub_server, model, history[1], scratch)
    assert traces_links(uploaded_card, hub_server) == [] and traces not in uploaded_card
    before, after = blobs_at(hub_server, model, history[1]), blobs_at(hub_server, model, history[0])
    assert set(before) == set(after) and {p for p in after if after[p] != before[p]} == {"README.md"}
    assert verify["training_traces_link"]["traces_commit"] == done["destinations"]["traces_commit"]
    assert done["verification"] == {"model_upload": "completed", "model": "completed", "traces": "completed",
                                    "archive": "completed", "restore": "completed"}

    # No planted secret, in any form we planted it, reaches a destination.
    hub_bytes = [data for _, _, data in stored_blobs(hub_server.root)]
    archived = archive_bytes(bucket)
    for secret in run.planted_secrets:
        value = secret["value"].encode()
        assert not any(value in blob for blob in hub_bytes), f"{secret['kind']} reached the Hub"
        assert value not in archived, f"{secret['kind']} reached the archive destination"
    # ... and the pipeline's own credentials appear in no log, sentinel or report.
    credentials = [os.environ["AWS_SECRET_ACCESS_KEY"].encode(), hub_server.token.encode()]
    for path in (data_root / JOB).rglob("*"):
        if path.is_file() and "sync" not in path.parts and ".work" not in path.parts:
            content = path.read_bytes()
            assert not any(c in content for c in credentials), f"a credential appears in {path}"
    assert not any(c in result.stdout.encode() + result.stderr.encode() for c in credentials)

    again = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert "Nothing to be done" in again.stdout + again.stderr

    # register again (as after a kill that came before Snakemake recorded the finished step): the one
    # row stays, and the completion record still says what registering this job did
    forced = run_snakemake(data_root, f"{JOB}/DONE", extra=("--forcerun", "register"), env=env_for(hub_server))
    assert forced.returncode == 0, forced.stderr[-3000:]
    redone = json.loads((data_root / JOB / "DONE").read_text())["registration"]
    assert redone == done["registration"] and redone["action"] == "inserted"


def test_reclaim_needs_authority_for_exactly_this_job(data_root: Path, bucket: str, iris, hub_server) -> None:
    run, record = seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
    env = env_for(hub_server)
    assert run_snakemake(data_root, f"{JOB}/DONE", env=env).returncode == 0
    store = open_store(record["store"])
    before = {info.key: info.size for info in store.list()}

    other = run_snakemake(data_root, f"{JOB}/DONE", env=env, config=("reclaim_authorized=another-job",))
    assert other.returncode == 0
    assert {info.key for info in store.list()} == set(before)
    assert json.loads((data_root / JOB / "reclaim.json").read_text())["status"] == "not_applicable"

    late = "trace_jobs/written-after-sync/result.json"
    store.put_bytes(late, b"{}")
    granted = run_snakemake(data_root, f"{JOB}/DONE", env=env, config=(f"reclaim_authorized={JOB}",))
    assert granted.returncode == 0, granted.stderr[-3000:]
    reclaim = json.loads((data_root / JOB / "reclaim.json").read_text())
    assert reclaim["status"] == "completed"
    assert reclaim["deleted_keys"] == len(before) and reclaim["deleted_bytes"] == sum(before.values())
    assert [info.key for info in store.list()] == [late]  # only what no manifest listed survives
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["reclaimed"]["keys"] == len(before)

    # a later invocation without authority still reports the reclamation that happened
    later = run_snakemake(data_root, f"{JOB}/DONE", env=env)
    assert later.returncode == 0
    assert json.loads((data_root / JOB / "reclaim.json").read_text())["deleted_keys"] == len(before)


def test_no_rule_blocks_selection_but_not_the_independent_steps(data_root: Path, bucket: str, iris, hub_server) -> None:
    overrides = publish_overrides(bucket, data_root)
    run, record = seed_example(data_root, bucket, iris, record_overrides=overrides)
    record["checkpoint"].pop("rule")
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    result = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert result.returncode != 0
    status = json.loads((data_root / JOB / "STATUS.json").read_text())
    assert "select_checkpoint" in status["blocked"]
    reason = status["steps"]["select_checkpoint"]["reason"]
    for step in run.complete_ckpt_steps:
        assert str(step) in reason
    assert "checkpoint.rule" in reason
    for independent in ("sync_logs", "sync_traces", "metric_surface", "publish_traces", "archive", "verify_archive"):
        assert independent in status["completed"], independent
    assert {"export_model", "publish_model", "register", "reclaim"} <= set(status["pending"])
    assert not (data_root / JOB / "DONE").exists() and not (data_root / JOB / "model").exists()

    record["checkpoint"]["rule"] = {"kind": "latest"}
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    resumed = run_snakemake(data_root, f"{JOB}/DONE", env=env_for(hub_server))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ran = {line.split()[-1].rstrip(":") for line in (resumed.stdout + resumed.stderr).splitlines()
           if line.strip().startswith(("rule ", "localrule "))}
    assert "sync_traces" not in ran and "publish_traces" not in ran and "archive" not in ran
    assert json.loads((data_root / JOB / "DONE").read_text())["checkpoint"]["step"] == max(run.complete_ckpt_steps)


def test_without_destinations_publication_is_not_applicable(data_root: Path, bucket: str, iris) -> None:
    seed_example(data_root, bucket, iris)
    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-3000:]
    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["steps"]["publish_model"] == "not_applicable"
    assert done["steps"]["link_model_card"] == "not_applicable"
    assert done["steps"]["publish_traces"] == "not_applicable"
    assert done["steps"]["register"] == "not_applicable"
    assert done["artifacts"]["training_logs"] == "not_applicable"
    assert done["artifacts"]["training_traces_link"] == "not_applicable"
    assert done["artifacts"]["weights"] == "present"  # the flat model exists locally
    assert done["destinations"] == "not_applicable"
    assert not (data_root / JOB / "stage").exists()


def assert_model_published_without_the_link(data_root: Path, hub, record: dict, status: dict) -> str:
    """Export, upload and its verification done; no verify/model.json, no registration, no DONE; the
    card on the Hub does not name the trace dataset. Returns the model repo's main commit."""
    job_dir = data_root / JOB
    model, traces = record["publish"]["model"], record["publish"]["traces"]
    assert {"export_model", "publish_model"} <= set(status["completed"]), status
    upload = read_json(job_dir / "verify" / "model_upload.json")
    assert upload["status"] == "completed" and "check-publication --pending-traces-link" in upload["checks"]
    for absent in ("verify/traces.json", "verify/model.json", "register.json", "DONE"):
        assert not (job_dir / absent).exists(), absent
    head = model_history(hub, model)[0]
    assert head == upload["verified_commit"]
    card = card_at(hub, model, head, data_root.parent / "cards")
    assert traces_links(card, hub) == [] and traces not in card and TRACES_PENDING in card
    assert status["artifacts"] == {
        "weights": "present", "tokenizer_configuration": "present", "training_logs": "present",
        "training_traces_link": "absent"}
    assert "link_model_card" in status["pending"] and "register" not in status["completed"]
    assert status["steps"]["link_model_card"]["blocked_by"] in {"publish_traces", "sync_traces"}
    return head


def assert_a_rerun_links_the_card_in_one_readme_commit(data_root: Path, hub, record: dict, head: str, env: dict,
                                                       must_not_rerun: set[str]) -> None:
    job_dir = data_root / JOB
    model, traces = record["publish"]["model"], record["publish"]["traces"]
    rerun = run_snakemake(data_root, f"{JOB}/DONE", env=env)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    ran = ran_rules(rerun)
    assert {"publish_traces", "link_model_card", "register"} <= ran and not must_not_rerun & ran, ran
    history = model_history(hub, model)
    assert history[1] == head  # exactly one new commit ...
    before, after = blobs_at(hub, model, head), blobs_at(hub, model, history[0])
    assert set(before) == set(after) and {p for p in after if after[p] != before[p]} == {"README.md"}  # ... README only
    card = card_at(hub, model, history[0], data_root.parent / "cards")
    assert traces_links(card, hub) == [traces]
    assert card.encode() == (job_dir / "stage" / "model_card" / "README.md").read_bytes()
    verify = read_json(job_dir / "verify" / "model.json")
    assert verify["status"] == "completed" and verify["commit"] == verify["verified_commit"] == history[0]
    assert verify["training_traces_link"]["dataset"] == traces
    done = read_json(job_dir / "DONE")
    assert done["artifacts"] == {"weights": "present", "tokenizer_configuration": "present",
                                 "training_logs": "present", "training_traces_link": "present"}
    assert done["steps"]["link_model_card"] == "completed"
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]


def test_the_card_links_the_traces_only_once_they_are_verified(data_root: Path, bucket: str, iris, hub_server) -> None:
    """The trace dataset cannot be published (a public repo of that name exists, the record asks for a
    private one): the model is still exported, uploaded and verified, its card's link pending; once the
    operator removes the stray repo, a rerun publishes the traces and links them in one README commit."""
    overrides = publish_overrides(bucket, data_root)
    traces = overrides["publish"]["traces"]
    hub_api(hub_server).create_repo(traces, repo_type="dataset", private=False)
    run, record = seed_example(data_root, bucket, iris, record_overrides=overrides)
    env = env_for(hub_server)
    first = run_snakemake(data_root, f"{JOB}/DONE", env=env)
    assert first.returncode != 0
    status = read_json(data_root / JOB / "STATUS.json")
    head = assert_model_published_without_the_link(data_root, hub_server, record, status)
    assert "publish_traces" in status["blocked"]
    link = status["steps"]["link_model_card"]
    assert link["blocked_by"] == "publish_traces" and link["log"] == "logs/publish_traces.log"
    assert link["reason"].startswith("waits for publish_traces (verify/traces.json); publish_traces is blocked: ")
    assert traces in link["reason"] and "public" in link["reason"]
    assert link["remaining"].startswith("publish_traces is blocked (dataset repo ")
    assert "fix the trace dataset" in link["remaining"]

    hub_api(hub_server).delete_repo(traces, repo_type="dataset")
    assert_a_rerun_links_the_card_in_one_readme_commit(
        data_root, hub_server, record, head, env, must_not_rerun={"export_model", "stage_model", "publish_model"})


def test_an_empty_trace_prefix_holds_back_only_the_card_link(data_root: Path, bucket: str, iris, hub_server) -> None:
    overrides = publish_overrides(bucket, data_root)
    run, record = seed_example(data_root, bucket, iris, record_overrides=overrides)
    record["layout"] = {**record.get("layout", {}), "traces": "no_traces_here"}
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    env = env_for(hub_server)
    first = run_snakemake(data_root, f"{JOB}/DONE", env=env)
    assert first.returncode != 0
    status = read_json(data_root / JOB / "STATUS.json")
    head = assert_model_published_without_the_link(data_root, hub_server, record, status)
    assert "sync_traces" in status["blocked"]
    link = status["steps"]["link_model_card"]
    assert link["blocked_by"] == "sync_traces" and "no_traces_here" in link["reason"]
    assert "verify/traces.json" in link["reason"] and "no trace objects" in link["reason"]

    record["layout"].pop("traces")  # the fix: the record names the real trace tree
    (data_root / "records" / f"{JOB}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    assert_a_rerun_links_the_card_in_one_readme_commit(
        data_root, hub_server, record, head, env, must_not_rerun={"export_model", "publish_model"})


def test_what_holds_the_card_link_back_is_named_down_to_the_failed_trace_step(tmp_path: Path) -> None:
    """STATUS.json's reason for link_model_card, from the files a run leaves (no pipeline run)."""
    from rlkeep.jsonio import write_json
    from rlkeep.stepstate import collect_steps

    job_dir = tmp_path / JOB
    (job_dir / "logs").mkdir(parents=True)
    write_json(job_dir / "verify" / "model_upload.json", {"status": "completed"})
    sync_reason = "s3://b/iris/rl-demo/no_traces_here: no trace objects under this prefix"
    (job_dir / "logs" / "sync_traces.log").write_text(f"listing\nrlkeep: {sync_reason}\n")
    steps = collect_steps(job_dir, "rl")
    assert steps["publish_model"]["status"] == "completed"
    for name, evidence in (("publish_traces", "stage_traces"), ("link_model_card", "publish_traces (verify/traces.json)")):
        # never run: pending, with the failed ancestor's name, reason, log and remedy (issue 27)
        assert steps[name]["status"] == "pending" and steps[name]["blocked_by"] == "sync_traces", steps[name]
        assert steps[name]["remaining"].startswith(f"sync_traces is blocked ({sync_reason}): fix the trace prefix")
        assert steps[name]["reason"] == f"waits for {evidence}; sync_traces is blocked: {sync_reason}"
        assert steps[name]["log"] == "logs/sync_traces.log"

    # The traces verified, the card commit itself failed: its own log is the reason.
    write_json(job_dir / "sync" / "trace_jobs.manifest.json", {"status": "completed"})
    write_json(job_dir / "verify" / "traces.json", {"status": "completed"})
    (job_dir / "logs" / "link_model_card.log").write_text("rlkeep: Hub model card commit failed for model repo x\n")
    link = collect_steps(job_dir, "rl")["link_model_card"]
    assert link["status"] == "blocked" and "blocked_by" not in link and link["reason"].startswith("Hub model card commit")
    # The model upload not done yet and nothing failed: pending, not blocked.
    (job_dir / "verify" / "model_upload.json").unlink()
    (job_dir / "logs" / "link_model_card.log").unlink()
    assert collect_steps(job_dir, "rl")["link_model_card"]["status"] == "pending"


@pytest.mark.parametrize("bad", ["rl-demo;rm -rf", "../escape"])
def test_targets_with_unsafe_job_names_match_no_rule(data_root: Path, bad: str) -> None:
    result = run_snakemake(data_root, f"{bad}/DONE", extra=("-n",))
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "MissingRuleException" in out or "No rule to produce" in out
