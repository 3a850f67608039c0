"""rlkeep.hub: publication and verification against the dev Hub through the real client; the
publications in both server modes (Xet, as the Hub is today, and LFS, a Hub without Xet)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import string
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from rlkeep_dev.devserver.hub import LFS_SIZE_THRESHOLD
from rlkeep.errors import RlkeepError
from rlkeep.hub import (
    TRACES_PENDING, check_publication, check_publication_main, compare_trees, download_fresh, link_traces_in_card,
    publish_model, publish_model_card, remote_extras, render_model_card, replace_trace_shards,
    verify_model_publication, verify_trace_publication,
)
from tests.support.hub import both_transfers, hub_server, no_client_backoff, stored_blobs

__all__ = ["hub_server", "no_client_backoff"]  # fixtures used below
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # httpx2 on LFS PUT

CARD = """---
license: apache-2.0
---
# rl-qwen3-swe-v3

Fine-tuned with SkyRL.

## Training Traces

Agent traces: [laion/rl-qwen3-swe-v3-traces](https://huggingface.co/datasets/laion/rl-qwen3-swe-v3-traces).

## Training Logs

See training_logs/.
"""


def write_tree(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def model_files(weights: bytes | None = None) -> dict[str, bytes | str]:
    return {
        "model.safetensors": weights if weights is not None else b"\x08\0\0\0\0\0\0\0{}      " + os.urandom(64),
        "config.json": '{"architectures": ["Qwen3ForCausalLM"]}',
        "tokenizer.json": '{"version": "1.0"}',
        "tokenizer_config.json": '{"model_max_length": 32768}',
        "training_logs/metrics.csv": "step,reward\n20,0.5\n",
        "training_logs/trainer.log": "step 20 reward 0.5\n",
        "README.md": CARD,
    }


def stage_model(root: Path, **kwargs: bytes) -> Path:
    stage = write_tree(root, model_files(**kwargs))
    (stage / ".snakemake_timestamp").write_text("")
    write_tree(stage, {".cache/huggingface/x.lock": "", "training_logs/.partial.tmp": "half"})
    return stage


def tree_state(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def stage_traces(root: Path, shards: int, rows: int = 3) -> Path:
    files: dict[str, bytes | str] = {
        f"data/train-{i:05d}.parquet": b"PAR1" + f"shard {i} of {shards} rows {rows}".encode() + b"\0PAR1"
        for i in range(shards)}
    files["trace_export_manifest.json"] = json.dumps({"rows": rows * shards, "shards": shards}, indent=2)
    return write_tree(root, files)


def hub_kwargs(server) -> dict[str, str]:
    return {"endpoint": server.url, "token": server.token}


# -- model publication -----------------------------------------------------------------------


@both_transfers
def test_publish_model_round_trip_with_lfs_weights(hub_server, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    big = b"\x08\0\0\0\0\0\0\0{}      " + os.urandom(LFS_SIZE_THRESHOLD + 1000)
    stage = stage_model(tmp_path / "stage", weights=big)
    before = tree_state(stage)
    with caplog.at_level("INFO", logger="rlkeep"):
        result = publish_model(stage, "laion/rl-model", private=True, commit_message="Publish rl-model",
                               **hub_kwargs(hub_server))
    kinds = {r["kind"] for r in hub_server.requests()}
    if hub_server.xet is not None:  # huggingface_hub's default transfer, where the Hub offers it
        assert "model repo laion/rl-model: uploading by Xet" in caplog.text
        assert "lfs_batch" not in kinds and hub_server.xet.received_bytes() >= len(big)
    else:  # the step's log says why it took LFS
        assert "uploading by LFS: the Hub answers it has no Xet (HTTP 501" in caplog.text
        assert {"lfs_batch", "lfs_put"} <= kinds
    assert result["created"] is True and result["no_op"] is False and result["private"] is True
    assert result["files"] == sorted(model_files())
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    info = api.repo_info("laion/rl-model", files_metadata=True)
    assert info.private is True and info.sha == result["commit"]
    assert sorted(s.rfilename for s in info.siblings) == sorted([*model_files(), ".gitattributes"])
    assert {s.rfilename: s.lfs.sha256 for s in info.siblings if s.lfs}["model.safetensors"] == \
        hashlib.sha256(big).hexdigest()

    download = download_fresh("laion/rl-model", tmp_path / "dl", repo_type="model", revision=result["commit"],
                              **hub_kwargs(hub_server))
    assert compare_trees(stage, download) == []
    assert remote_extras(stage, download) == [".gitattributes"]
    assert not (download / ".cache").exists()
    assert (download / "model.safetensors").read_bytes() == big
    assert tree_state(stage) == before


def test_a_model_of_more_files_than_one_preupload_batch_is_published_in_one_commit(hub_server, tmp_path: Path) -> None:
    stage = stage_model(tmp_path / "stage")
    for index in range(300):  # over huggingface_hub's 256-file batches, where upload_folder may split by Xet
        (stage / "extra" / f"part-{index:03d}.json").parent.mkdir(exist_ok=True)
        (stage / "extra" / f"part-{index:03d}.json").write_text(f'{{"part": {index}}}\n')
    hub_server.clear_requests()
    result = publish_model(stage, "laion/many", private=False, commit_message="many", **hub_kwargs(hub_server))
    assert len([r for r in hub_server.requests() if r["kind"] == "commit"]) == 1
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    assert [c.commit_id for c in api.list_repo_commits("laion/many")][0] == result["commit"]
    assert len(api.list_repo_files("laion/many")) == len(model_files()) + 300 + 1  # .gitattributes


@both_transfers
def test_republishing_identical_content_makes_no_commit(hub_server, tmp_path: Path) -> None:
    stage = stage_model(tmp_path / "stage")
    first = publish_model(stage, "laion/same", private=False, commit_message="one", **hub_kwargs(hub_server))
    hub_server.clear_requests()
    second = publish_model(stage, "laion/same", private=False, commit_message="two", **hub_kwargs(hub_server))
    assert second["commit"] == first["commit"]
    assert second["no_op"] is True and second["created"] is False
    assert [r for r in hub_server.requests() if r["kind"] == "commit"] == []


def commit_contents(server, repo_id: str, commit: str) -> dict[str, tuple[int, str]]:
    """path -> (size, sha256 for LFS/Xet files, git blob sha1 otherwise) of a commit, as the Hub lists it."""
    api = HfApi(endpoint=server.url, token=server.token)
    return {e.path: (e.size, e.lfs.sha256 if e.lfs else e.blob_id)
            for e in api.list_repo_tree(repo_id, revision=commit, recursive=True) if hasattr(e, "size")}


@pytest.mark.parametrize("hub_server", ["xet"], indirect=True)
def test_a_republication_of_an_unchanged_model_moves_under_one_percent_of_its_bytes_by_xet(
        hub_server, tmp_path: Path) -> None:
    """Guard: Xet as the default transfer (rlkeep.hub.transfer). Republished by LFS into a repo that
    lacks the objects, every byte would move again."""
    weights = b"\x08\0\0\0\0\0\0\0{}      " + os.urandom(LFS_SIZE_THRESHOLD + 4096)
    stage = stage_model(tmp_path / "stage", weights=weights)
    size = sum(path.stat().st_size for path in stage.rglob("*") if path.is_file())
    first = publish_model(stage, "laion/xet-once", private=False, commit_message="one", **hub_kwargs(hub_server))
    moved_first = hub_server.xet.received_bytes()
    assert moved_first >= len(weights)
    again = publish_model(stage, "laion/xet-once", private=False, commit_message="two", **hub_kwargs(hub_server))
    assert again["no_op"] is True and hub_server.xet.received_bytes() - moved_first < 0.01 * size
    # the same model into a repo that has none of it: Xet's chunk dedup still moves almost nothing
    other = publish_model(stage, "laion/xet-twice", private=False, commit_message="one", **hub_kwargs(hub_server))
    moved = hub_server.xet.received_bytes() - moved_first
    assert moved < 0.01 * size, (moved, size)
    assert commit_contents(hub_server, "laion/xet-twice", other["commit"]) == \
        commit_contents(hub_server, "laion/xet-once", first["commit"])


@pytest.mark.parametrize("kind", ["xet_token", "commit"])
@pytest.mark.parametrize("hub_server", ["xet"], indirect=True)
def test_an_interrupted_xet_publication_rerun_converges_to_the_same_commit_contents(
        hub_server, tmp_path: Path, no_client_backoff: None, kind: str) -> None:
    """Stopped before its CAS upload (the token) or after it (the commit): the Hub is unchanged, and
    the rerun's commit holds what an uninterrupted publication's does, reusing what was uploaded."""
    weights = b"\x08\0\0\0\0\0\0\0{}      " + os.urandom(LFS_SIZE_THRESHOLD + 4096)
    stage = stage_model(tmp_path / "stage", weights=weights)
    reference = publish_model(stage_model(tmp_path / "ref", weights=weights), "laion/xet-ref", private=False,
                              commit_message="x", **hub_kwargs(hub_server))
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    api.create_repo("laion/xet-cut")
    head = api.repo_info("laion/xet-cut").sha
    hub_server.fail_next(kind, 100)
    with pytest.raises(RlkeepError, match=r"laion/xet-cut"):
        publish_model(stage, "laion/xet-cut", private=False, commit_message="x", **hub_kwargs(hub_server))
    assert api.repo_info("laion/xet-cut").sha == head
    hub_server.clear_faults()
    moved_before = hub_server.xet.received_bytes()
    result = publish_model(stage, "laion/xet-cut", private=False, commit_message="x", **hub_kwargs(hub_server))
    assert result["commit"] != head and hub_server.xet.received_bytes() - moved_before < 0.01 * len(weights)
    assert commit_contents(hub_server, "laion/xet-cut", result["commit"]) == \
        commit_contents(hub_server, "laion/xet-ref", reference["commit"])
    assert compare_trees(stage, download_fresh("laion/xet-cut", tmp_path / "dl", repo_type="model",
                                                 revision=result["commit"], **hub_kwargs(hub_server))) == []


def test_publish_is_additive(hub_server, tmp_path: Path) -> None:
    stage = stage_model(tmp_path / "stage")
    publish_model(stage, "laion/additive", private=False, commit_message="one", **hub_kwargs(hub_server))
    hub_server.edit_file("laion/additive", "notes/extra.md", b"added by a colleague\n")
    (stage / "training_logs" / "trainer.log").write_text("step 40 reward 0.7\n")
    (stage / "tokenizer.json").unlink()
    result = publish_model(stage, "laion/additive", private=False, commit_message="two", **hub_kwargs(hub_server))
    files = HfApi(endpoint=hub_server.url, token=hub_server.token).list_repo_files("laion/additive",
                                                                                   revision=result["commit"])
    assert "notes/extra.md" in files and "tokenizer.json" in files  # nothing remote was deleted
    assert result["no_op"] is False


def test_publish_refuses_a_public_repo_for_a_private_publication(hub_server, tmp_path: Path) -> None:
    HfApi(endpoint=hub_server.url, token=hub_server.token).create_repo("laion/public", private=False)
    with pytest.raises(RlkeepError, match="laion/public.*public"):
        publish_model(stage_model(tmp_path / "stage"), "laion/public", private=True, commit_message="x",
                      **hub_kwargs(hub_server))
    assert HfApi(endpoint=hub_server.url).list_repo_files("laion/public") == [".gitattributes"]


def test_endpoint_and_token_come_from_the_environment(hub_server, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_TOKEN", hub_server.token)
    result = publish_model(stage_model(tmp_path / "stage"), "laion/env", private=True, commit_message="env")
    assert HfApi(endpoint=hub_server.url, token=hub_server.token).repo_info("laion/env").sha == result["commit"]


def test_wrong_token_fails_clearly_without_echoing_it(hub_server, tmp_path: Path) -> None:
    wrong = "wrong-token-" + "x" * 20
    with pytest.raises(RlkeepError) as caught:
        publish_model(stage_model(tmp_path / "stage"), "laion/denied", private=True, commit_message="x",
                      endpoint=hub_server.url, token=wrong)
    message = str(caught.value)
    assert "laion/denied" in message and "401" in message and "repo creation" in message
    assert wrong not in message and caught.value.__cause__ is None


def test_token_never_reaches_stored_bytes_messages_or_evidence(hub_server, tmp_path: Path) -> None:
    stage = stage_model(tmp_path / "stage")
    result = publish_model(stage, "laion/scan", private=True, commit_message="publish", **hub_kwargs(hub_server))
    traces = replace_trace_shards(stage_traces(tmp_path / "traces", 2), "laion/scan-traces", private=True,
                                  commit_message="traces", **hub_kwargs(hub_server))
    evidence = verify_trace_publication(tmp_path / "traces", "laion/scan-traces", traces["commit"],
                                        **hub_kwargs(hub_server))
    token = hub_server.token.encode()
    blobs = list(stored_blobs(hub_server.root))
    assert {repo for repo, _, _ in blobs} == {"laion/scan", "datasets/laion/scan-traces"}
    assert not [(repo, path) for repo, path, data in blobs if token in data]
    assert hub_server.token not in json.dumps([result, traces, evidence])


# -- model verification --------------------------------------------------------------------------


@pytest.fixture
def redactor():
    redaction = pytest.importorskip("rlkeep.redaction", reason="rlkeep.redaction (another helper's module) missing")
    return redaction.redactor_from_environment()


def fake_credentials() -> str:
    """Credential-shaped text made at run time, so no secret-looking literal lives in the sources."""
    rng = random.Random(7)
    hf = "hf_" + "".join(rng.choices(string.ascii_letters, k=34))
    aws = "AKIA" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=16))
    return f"HF_TOKEN={hf}\naws_access_key_id = {aws}\n"


@both_transfers
def test_verify_model_publication_passes_and_returns_evidence(hub_server, tmp_path: Path, redactor) -> None:
    stage = stage_model(tmp_path / "stage")
    commit = publish_model(stage, "laion/verified", private=True, commit_message="x",
                           **hub_kwargs(hub_server))["commit"]
    evidence = verify_model_publication(stage, "laion/verified", commit, tmp_path / "verify", redactor=redactor,
                                        traces_repo="laion/rl-qwen3-swe-v3-traces", **hub_kwargs(hub_server))
    assert evidence["status"] == "completed" and evidence["redaction_findings"] == 0
    assert evidence["commit"] == evidence["verified_commit"] == commit
    assert [f["path"] for f in evidence["files"]] == sorted([*model_files(), ".gitattributes"])
    weights = next(f for f in evidence["files"] if f["path"] == "model.safetensors")
    assert weights["sha256"] == hashlib.sha256((stage / "model.safetensors").read_bytes()).hexdigest()
    assert Path(evidence["download_dir"]).parent == tmp_path / "verify"
    assert hub_server.token not in json.dumps(evidence)


def test_verify_detects_a_model_card_edited_remotely(hub_server, tmp_path: Path, redactor) -> None:
    stage = stage_model(tmp_path / "stage")
    commit = publish_model(stage, "laion/edited", private=True, commit_message="x", **hub_kwargs(hub_server))["commit"]
    same_size_edit = CARD.replace("laion/", "other/").encode()
    edited = hub_server.edit_file("laion/edited", "README.md", same_size_edit)
    with pytest.raises(RlkeepError) as caught:
        verify_model_publication(stage, "laion/edited", commit, tmp_path / "verify", redactor=redactor,
                                 **hub_kwargs(hub_server))
    message = str(caught.value)
    assert "README.md: content differs" in message
    assert f"main at {edited}" in message and f"published {commit}" in message
    assert (stage / "README.md").read_text() == CARD  # staging kept for the rerun


def test_verify_runs_the_redaction_check_on_the_download(hub_server, tmp_path: Path, redactor) -> None:
    stage = stage_model(tmp_path / "stage")
    commit = publish_model(stage, "laion/leaky", private=True, commit_message="x", **hub_kwargs(hub_server))["commit"]
    secret = fake_credentials()
    hub_server.edit_file("laion/leaky", "training_logs/env.txt", secret.encode())
    with pytest.raises(RlkeepError) as caught:
        verify_model_publication(stage, "laion/leaky", commit, tmp_path / "verify", redactor=redactor,
                                 **hub_kwargs(hub_server))
    message = str(caught.value)
    assert "redaction check" in message and "training_logs/env.txt" in message
    assert "training_logs/env.txt: on the Hub but not in staging" in message
    assert not any(line.split("=")[-1].strip() in message for line in secret.splitlines())


def test_verify_rejects_a_commit_that_main_never_had(hub_server, tmp_path: Path, redactor) -> None:
    stage = stage_model(tmp_path / "stage")
    publish_model(stage, "laion/history", private=False, commit_message="x", **hub_kwargs(hub_server))
    with pytest.raises(RlkeepError, match="is not in the history of main"):
        verify_model_publication(stage, "laion/history", "0" * 40, tmp_path / "verify", redactor=redactor,
                                 **hub_kwargs(hub_server))


# -- faults: clear errors, staging untouched, reruns complete ---------------------------------------


@pytest.mark.parametrize(("kind", "count", "step"), [
    ("commit", 1, "commit"), ("preupload", 6, "preupload"), ("lfs_put", 6, "LFS upload")])
def test_upload_fault_leaves_staging_and_remote_intact_and_rerun_completes(
        hub_server, tmp_path: Path, no_client_backoff: None, kind: str, count: int, step: str) -> None:
    stage = stage_model(tmp_path / "stage")
    before = tree_state(stage)
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    api.create_repo("laion/faulty")
    head = api.repo_info("laion/faulty").sha
    hub_server.fail_next(kind, count)
    with pytest.raises(RlkeepError) as caught:
        publish_model(stage, "laion/faulty", private=False, commit_message="x", **hub_kwargs(hub_server))
    message = str(caught.value)
    assert "laion/faulty" in message and f"({step})" in message and "HTTP 500" in message
    assert hub_server.token not in message and "sig=" not in message
    assert tree_state(stage) == before
    assert api.repo_info("laion/faulty").sha == head
    hub_server.clear_faults()
    result = publish_model(stage, "laion/faulty", private=False, commit_message="x", **hub_kwargs(hub_server))
    assert result["commit"] != head
    assert compare_trees(stage, download_fresh("laion/faulty", tmp_path / "dl", repo_type="model",
                                                 revision=result["commit"], **hub_kwargs(hub_server))) == []


def test_a_transient_lfs_failure_is_retried_by_the_client(hub_server, tmp_path: Path, no_client_backoff: None) -> None:
    hub_server.fail_next("lfs_put", 1)
    result = publish_model(stage_model(tmp_path / "stage"), "laion/transient", private=False, commit_message="x",
                           **hub_kwargs(hub_server))
    assert [r["status"] for r in hub_server.requests() if r["kind"] == "lfs_put"] == [500, 200]
    assert result["no_op"] is False


def test_download_fault_raises_and_leaves_no_partial_download(hub_server, tmp_path: Path,
                                                              no_client_backoff: None) -> None:
    stage = stage_model(tmp_path / "stage")
    commit = publish_model(stage, "laion/dl", private=True, commit_message="x", **hub_kwargs(hub_server))["commit"]
    hub_server.fail_next("download", 100)  # outlasts the client's own retries of each file
    with pytest.raises(RlkeepError, match=r"laion/dl.*download"):
        download_fresh("laion/dl", tmp_path / "dl", repo_type="model", revision=commit, **hub_kwargs(hub_server))
    assert not (tmp_path / "dl").exists()
    hub_server.clear_faults()
    download = download_fresh("laion/dl", tmp_path / "dl", repo_type="model", revision=commit,
                              **hub_kwargs(hub_server))
    assert compare_trees(stage, download) == []


def test_download_fresh_refuses_a_non_empty_directory(hub_server, tmp_path: Path) -> None:
    write_tree(tmp_path / "dl", {"old.txt": "stale"})
    with pytest.raises(RlkeepError, match="new empty directory"):
        download_fresh("laion/any", tmp_path / "dl", repo_type="model", revision="main", **hub_kwargs(hub_server))
    assert (tmp_path / "dl" / "old.txt").read_text() == "stale"


# -- trace dataset ----------------------------------------------------------------------------------


@both_transfers
def test_replace_trace_shards_deletes_only_stale_train_shards_in_one_commit(hub_server, tmp_path: Path) -> None:
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    first = replace_trace_shards(stage_traces(tmp_path / "v1", 3), "laion/traces", private=True,
                                 commit_message="Replace trace export", **hub_kwargs(hub_server))
    assert first["created"] is True and first["deleted"] == [] and first["private"] is True
    hub_server.edit_file("laion/traces", "README.md", b"# dataset card by a colleague\n", repo_type="dataset")
    hub_server.edit_file("laion/traces", "data/extra-notes.parquet", b"\0kept", repo_type="dataset")
    commits_before = len(api.list_repo_commits("laion/traces", repo_type="dataset"))

    second = replace_trace_shards(stage_traces(tmp_path / "v2", 2, rows=5), "laion/traces", private=True,
                                  commit_message="Replace trace export", **hub_kwargs(hub_server))
    assert second["deleted"] == ["data/train-00002.parquet"]
    assert len(api.list_repo_commits("laion/traces", repo_type="dataset")) == commits_before + 1
    assert api.list_repo_files("laion/traces", repo_type="dataset") == [
        ".gitattributes", "README.md", "data/extra-notes.parquet", "data/train-00000.parquet",
        "data/train-00001.parquet", "trace_export_manifest.json"]
    evidence = verify_trace_publication(tmp_path / "v2", "laion/traces", second["commit"], **hub_kwargs(hub_server))
    assert [s["path"] for s in evidence["shards"]] == ["data/train-00000.parquet", "data/train-00001.parquet"]
    assert evidence["status"] == "completed" and evidence["verified_commit"] == second["commit"]

    third = replace_trace_shards(tmp_path / "v2", "laion/traces", private=True, commit_message="again",
                                 **hub_kwargs(hub_server))
    assert third["no_op"] is True and third["commit"] == second["commit"]


@both_transfers
def test_trace_commit_fault_changes_nothing_and_rerun_completes(hub_server, tmp_path: Path) -> None:
    replace_trace_shards(stage_traces(tmp_path / "v1", 3), "laion/tr-fault", private=False, commit_message="v1",
                         **hub_kwargs(hub_server))
    stage = stage_traces(tmp_path / "v2", 1, rows=9)
    before = tree_state(stage)
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    files_before = api.list_repo_files("laion/tr-fault", repo_type="dataset")
    hub_server.fail_next("commit", 1)
    with pytest.raises(RlkeepError, match=r"laion/tr-fault.*\(commit\)"):
        replace_trace_shards(stage, "laion/tr-fault", private=False, commit_message="v2", **hub_kwargs(hub_server))
    assert api.list_repo_files("laion/tr-fault", repo_type="dataset") == files_before
    assert tree_state(stage) == before
    result = replace_trace_shards(stage, "laion/tr-fault", private=False, commit_message="v2",
                                  **hub_kwargs(hub_server))
    assert result["deleted"] == ["data/train-00001.parquet", "data/train-00002.parquet"]
    verify_trace_publication(stage, "laion/tr-fault", result["commit"], **hub_kwargs(hub_server))


def test_verify_traces_detects_a_stale_shard_and_a_changed_manifest(hub_server, tmp_path: Path) -> None:
    stage = stage_traces(tmp_path / "stage", 2)
    commit = replace_trace_shards(stage, "laion/tr-verify", private=False, commit_message="v1",
                                  **hub_kwargs(hub_server))["commit"]
    hub_server.edit_file("laion/tr-verify", "data/train-00007.parquet", b"\0stale", repo_type="dataset")
    hub_server.edit_file("laion/tr-verify", "trace_export_manifest.json", b'{"rows": 1}', repo_type="dataset")
    with pytest.raises(RlkeepError) as caught:
        verify_trace_publication(stage, "laion/tr-verify", commit, **hub_kwargs(hub_server))
    message = str(caught.value)
    assert "data/train-00007.parquet: stale shard" in message
    assert "trace_export_manifest.json: the Hub copy differs" in message


def test_verify_traces_detects_a_shard_with_other_content(hub_server, tmp_path: Path) -> None:
    stage = stage_traces(tmp_path / "stage", 2)
    commit = replace_trace_shards(stage, "laion/tr-bytes", private=False, commit_message="v1",
                                  **hub_kwargs(hub_server))["commit"]
    original = (stage / "data/train-00001.parquet").read_bytes()
    hub_server.edit_file("laion/tr-bytes", "data/train-00001.parquet", original[::-1], repo_type="dataset")
    with pytest.raises(RlkeepError, match=r"data/train-00001.parquet: sha256 differs"):
        verify_trace_publication(stage, "laion/tr-bytes", commit, **hub_kwargs(hub_server))


def test_trace_staging_must_be_a_trace_export(hub_server, tmp_path: Path) -> None:
    stage = stage_traces(tmp_path / "stage", 1)
    (stage / "trace_export_manifest.json").unlink()
    with pytest.raises(RlkeepError, match="trace_export_manifest.json: missing"):
        replace_trace_shards(stage, "laion/tr-bad", private=False, commit_message="x", **hub_kwargs(hub_server))
    stage = stage_traces(tmp_path / "stage2", 1)
    write_tree(stage, {"notes.txt": "x"})
    with pytest.raises(RlkeepError, match="notes.txt"):
        replace_trace_shards(stage, "laion/tr-bad", private=False, commit_message="x", **hub_kwargs(hub_server))
    assert not HfApi(endpoint=hub_server.url, token=hub_server.token).repo_exists("laion/tr-bad", repo_type="dataset")


# -- tree comparison and publication checks ----------------------------------------------------------


def test_compare_trees_reports_each_kind_of_difference(tmp_path: Path) -> None:
    stage = write_tree(tmp_path / "stage", {"a.txt": "same", "b.txt": "short", "c.txt": "abc", "gone.txt": "x"})
    write_tree(stage, {".snakemake_timestamp": ""})
    remote = write_tree(tmp_path / "remote", {"a.txt": "same", "b.txt": "longer", "c.txt": "abd",
                                              "surprise.txt": "y", ".gitattributes": "*.bin filter=lfs\n",
                                              ".cache/huggingface/trees/x.json": "{}"})
    problems = compare_trees(stage, remote)
    assert problems == [
        "gone.txt: in staging but missing from the Hub",
        "surprise.txt: on the Hub but not in staging",
        "b.txt: size differs (staging 5 bytes, Hub 6 bytes)",
        f"c.txt: content differs (sha256 staging {hashlib.sha256(b'abc').hexdigest()}, "
        f"Hub {hashlib.sha256(b'abd').hexdigest()})",
    ]


def test_check_publication_passes_on_a_complete_tree(tmp_path: Path) -> None:
    assert check_publication(write_tree(tmp_path / "m", model_files())) == []


def remove(rel: str):
    def apply(root: Path) -> None:
        target = root / rel
        if target.is_dir():
            for path in sorted(target.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            target.rmdir()
        else:
            target.unlink()
    return apply


def replace_text(rel: str, text: str):
    def apply(root: Path) -> None:
        (root / rel).write_text(text)
    return apply


@pytest.mark.parametrize(("damage", "expected"), [
    (remove("model.safetensors"), "no top-level *.safetensors weights file"),
    (replace_text("model.safetensors", ""), "model.safetensors: empty weights file"),
    (remove("config.json"), "config.json: missing"),
    (replace_text("config.json", "{not json"), "config.json: not valid JSON"),
    (lambda root: [remove("tokenizer.json")(root), remove("tokenizer_config.json")(root)], "no tokenizer file"),
    (remove("training_logs"), "training_logs/: missing"),
    (lambda root: [replace_text("training_logs/metrics.csv", "")(root), remove("training_logs/trainer.log")(root)],
     "training_logs/: empty"),
    (remove("README.md"), "README.md: missing"),
    (replace_text("README.md", CARD.replace("## Training Traces", "## Traces")), "no '## Training Traces' section"),
    (replace_text("README.md", CARD.replace("/datasets/", "/")), "links no Hugging Face dataset"),
    (replace_text("README.md", "# card\n\n## Training Traces\n\nTBD\n\n## Data\n\nhttps://huggingface.co/datasets/a/b\n"),
     "links no Hugging Face dataset"),
], ids=["no-weights", "empty-weights", "no-config", "bad-config", "no-tokenizer", "no-training-logs",
        "empty-training-logs", "no-readme", "no-traces-section", "no-dataset-link", "link-outside-section"])
def test_check_publication_names_each_missing_item(tmp_path: Path, damage, expected: str) -> None:
    root = write_tree(tmp_path / "m", model_files())
    damage(root)
    problems = check_publication(root)
    assert len(problems) == 1 and expected in problems[0], problems


def test_check_publication_accepts_bpe_pair_sharded_weights_and_links_at_any_hub(tmp_path: Path) -> None:
    files = model_files()
    del files["tokenizer.json"], files["tokenizer_config.json"], files["model.safetensors"]
    files.update({"vocab.json": "{}", "merges.txt": "#version: 0.2\n",
                  "model-00001-of-00002.safetensors": b"w1", "model-00002-of-00002.safetensors": b"w2",
                  "model.safetensors.index.json": json.dumps({"weight_map": {
                      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}),
                  "README.md": "## Training Traces\n\nhttp://127.0.0.1:9/datasets/laion/t\n"})
    root = write_tree(tmp_path / "m", files)
    # a link at any Hub address counts; what is compared is the repo id it names
    assert check_publication(root) == [] == check_publication(root, expected_dataset="laion/t")
    assert "not the trace dataset laion/other" in check_publication(root, expected_dataset="laion/other")[0]
    (root / "model-00002-of-00002.safetensors").unlink()
    assert check_publication(root) == [
        "model.safetensors.index.json: references missing shard model-00002-of-00002.safetensors"]


def test_check_publication_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_tree(tmp_path / "m", model_files())
    assert check_publication_main([str(root)]) == 0
    (root / "config.json").unlink()
    assert check_publication_main([str(root)]) == 1
    assert "problem: config.json: missing" in capsys.readouterr().out
    assert check_publication_main([str(tmp_path / "absent")]) == 1


# -- the card's trace link: pending until the trace dataset is verified, then one README-only commit ----


TRACES_REPO = "laion/rl-qwen3-swe-v3-traces"
PENDING_CARD = CARD.replace(
    f"Agent traces: [{TRACES_REPO}](https://huggingface.co/datasets/{TRACES_REPO}).", TRACES_PENDING)


def pending_model_files() -> dict[str, bytes | str]:
    return {**model_files(), "README.md": PENDING_CARD}


def test_a_pending_card_passes_every_check_but_the_link_and_a_premature_link_fails_it(tmp_path: Path) -> None:
    pending = write_tree(tmp_path / "pending", pending_model_files())
    assert check_publication(pending, pending_traces_link=True) == []
    assert "links no Hugging Face dataset" in " ".join(check_publication(pending))  # the full check still fails
    linked = write_tree(tmp_path / "linked", model_files())
    premature = check_publication(linked, pending_traces_link=True)
    assert len(premature) == 1 and TRACES_REPO in premature[0]
    assert "before the trace dataset is verified" in premature[0]
    (pending / "README.md").write_text(PENDING_CARD.replace("## Training Traces", "## Traces"))
    assert check_publication(pending, pending_traces_link=True) == ["README.md: no '## Training Traces' section"]
    (pending / "config.json").unlink()  # every other check still runs
    assert "config.json: missing" in " ".join(check_publication(pending, pending_traces_link=True))


def test_check_publication_cli_pending_link_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pending = write_tree(tmp_path / "pending", pending_model_files())
    linked = write_tree(tmp_path / "linked", model_files())
    assert check_publication_main([str(pending)]) == 1  # the contract's check keeps its meaning
    assert check_publication_main([str(pending), "--pending-traces-link"]) == 0
    assert "Training Traces link, which is pending" in capsys.readouterr().out
    assert check_publication_main([str(linked), "--pending-traces-link"]) == 1
    assert "before the trace dataset is verified" in capsys.readouterr().out
    assert check_publication_main([str(linked)]) == 0
    with pytest.raises(SystemExit):
        check_publication_main([str(linked), "--pending-traces-link", "--dataset", TRACES_REPO])


def rendered_card() -> str:
    return render_model_card(job="rl-demo", publish={"model": "demo/rl-demo", "traces": "demo/rl-demo-traces"},
                             base_model="demo/base", selected={"step": 40, "rule": {"kind": "latest"},
                                                               "rationale": "latest complete checkpoint"},
                             export={"format": "hf"}, chain={"attempts": [{"id": "/demo/rl-demo"}]},
                             tracker_url=None, training_logs=["metrics.csv"])


def test_the_staged_card_does_not_name_the_dataset_and_linking_changes_only_its_section_and_front_matter(
        tmp_path: Path) -> None:
    import yaml

    card = rendered_card()
    assert "rl-demo-traces" not in card and TRACES_PENDING in card
    url = "http://127.0.0.1:9/datasets/demo/rl-demo-traces"
    linked = link_traces_in_card(card, "demo/rl-demo-traces", url)
    root = write_tree(tmp_path / "m", {**model_files(), "README.md": linked})
    assert check_publication(root, expected_dataset="demo/rl-demo-traces") == []
    assert yaml.safe_load(linked.split("---\n")[1])["datasets"] == ["demo/rl-demo-traces"]
    assert link_traces_in_card(linked, "demo/rl-demo-traces", url) == linked  # a rerun commits the same bytes
    # everything outside the front matter and the Training Traces section is unchanged
    before, after = card.split("---\n", 2)[2], linked.split("---\n", 2)[2]
    assert before.replace(TRACES_PENDING, "") == after.replace(f"[demo/rl-demo-traces]({url})", "").replace(
        "The agent traces of this run are the dataset , rebuilt from the full durable trace tree.", "")
    with pytest.raises(RlkeepError, match="no '## Training Traces' section"):
        link_traces_in_card(card.replace("## Training Traces", "## Traces"), "demo/rl-demo-traces", url)


def test_the_card_commit_changes_readme_only_and_deletes_nothing(hub_server, tmp_path: Path, redactor) -> None:
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    stage = write_tree(tmp_path / "stage", pending_model_files())
    uploaded = publish_model(stage, "laion/card", private=True, commit_message="upload", **hub_kwargs(hub_server))
    upload_evidence = verify_model_publication(stage, "laion/card", uploaded["commit"], tmp_path / "v1",
                                               redactor=redactor, pending_traces_link=True, **hub_kwargs(hub_server))
    assert "check-publication --pending-traces-link" in upload_evidence["checks"]
    with pytest.raises(RlkeepError, match="links no Hugging Face dataset"):  # the full check needs the link
        verify_model_publication(stage, "laion/card", uploaded["commit"], tmp_path / "v2", redactor=redactor,
                                 **hub_kwargs(hub_server))

    card = tmp_path / "card" / "README.md"
    card.parent.mkdir()
    card.write_text(CARD)  # the linked card
    hub_server.clear_requests()
    linked = publish_model_card(card, "laion/card", commit_message="link", **hub_kwargs(hub_server))
    assert linked["parent"] == uploaded["commit"] and linked["no_op"] is False
    assert len([r for r in hub_server.requests() if r["kind"] == "commit"]) == 1
    before = {f.rfilename: f.blob_id for f in api.list_repo_tree("laion/card", revision=uploaded["commit"],
                                                                  recursive=True) if hasattr(f, "blob_id")}
    after = {f.rfilename: f.blob_id for f in api.list_repo_tree("laion/card", revision=linked["commit"],
                                                                 recursive=True) if hasattr(f, "blob_id")}
    assert set(after) == set(before) and {k for k in after if after[k] != before[k]} == {"README.md"}

    evidence = verify_model_publication(stage, "laion/card", linked["commit"], tmp_path / "v3", redactor=redactor,
                                        traces_repo=TRACES_REPO, card=card, **hub_kwargs(hub_server))
    assert evidence["verified_commit"] == linked["commit"]
    assert {f["path"]: f["sha256"] for f in evidence["files"]}["README.md"] == hashlib.sha256(CARD.encode()).hexdigest()
    with pytest.raises(RlkeepError, match="README.md: size differs"):  # staging's card is the pending one
        verify_model_publication(stage, "laion/card", linked["commit"], tmp_path / "v4", redactor=redactor,
                                 traces_repo=TRACES_REPO, **hub_kwargs(hub_server))

    hub_server.edit_file("laion/card", "notes/colleague.md", b"kept\n")
    hub_server.clear_requests()
    again = publish_model_card(card, "laion/card", commit_message="link", **hub_kwargs(hub_server))
    assert again["no_op"] is True and [r for r in hub_server.requests() if r["kind"] == "commit"] == []
    assert "notes/colleague.md" in api.list_repo_files("laion/card")


def test_a_failed_card_commit_changes_nothing_and_a_rerun_completes(hub_server, tmp_path: Path,
                                                                    no_client_backoff: None) -> None:
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    stage = write_tree(tmp_path / "stage", pending_model_files())
    head = publish_model(stage, "laion/card-fault", private=True, commit_message="upload",
                         **hub_kwargs(hub_server))["commit"]
    card = write_tree(tmp_path / "card", {"README.md": CARD}) / "README.md"
    hub_server.fail_next("commit", 1)
    with pytest.raises(RlkeepError) as caught:
        publish_model_card(card, "laion/card-fault", commit_message="link", **hub_kwargs(hub_server))
    message = str(caught.value)
    assert "laion/card-fault" in message and "model card commit" in message and "HTTP 500" in message
    assert hub_server.token not in message and card.read_text() == CARD
    assert api.repo_info("laion/card-fault").sha == head
    hub_server.clear_faults()
    linked = publish_model_card(card, "laion/card-fault", commit_message="link", **hub_kwargs(hub_server))
    assert linked["parent"] == head and api.repo_info("laion/card-fault").sha == linked["commit"]


def test_the_hub_packages_export_every_name_they_list() -> None:
    """Every name rlkeep.hub and the dev Hub server list in __all__ is there (module sizes and
    docstrings are tests/test_layout.py's, for every module)."""
    import rlkeep.hub
    import rlkeep_dev.devserver.hub

    for package in (rlkeep.hub, rlkeep_dev.devserver.hub):
        assert [name for name in package.__all__ if not hasattr(package, name)] == [], package.__name__
        assert len(list(Path(package.__file__).parent.glob("*.py"))) >= 7, package.__name__
