"""The Hub-compatible dev server, driven by the real huggingface_hub 2.4 client: in LFS mode (the
client's Xet off, as most tests here drive the LFS protocol) and in Xet mode (hf_xet's local CAS)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from rlkeep_dev.devserver.hub import (
    INITIAL_GITATTRIBUTES, LFS_SIZE_THRESHOLD, git_blob_sha1, lfs_patterns, split_raw_path, upload_mode,
)
from tests.support.hub import hub_server, new_token, no_client_backoff, running_hub, start_hub_process, stored_blobs

__all__ = ["hub_server", "no_client_backoff"]  # fixtures used below
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # httpx2 on LFS PUT


@pytest.fixture(autouse=True)
def xet_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


def api_for(server, token: str | bool | None = None) -> HfApi:
    return HfApi(endpoint=server.url, token=server.token if token is None else token)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def text_bytes(size: int) -> bytes:
    """Text with no NUL byte, so only the size can make it LFS."""
    line = b"step=1 reward=0.5 loss=0.25\n"
    return (line * (size // len(line) + 1))[:size]


# -- pure helpers ----------------------------------------------------------------------------


def test_split_raw_path_keeps_encoded_slashes_in_one_segment() -> None:
    assert split_raw_path("/api/models/ns/n/tree/refs%2Fpr%2F1/sub%2Fdeeper") == [
        "api", "models", "ns", "n", "tree", "refs/pr/1", "sub/deeper"]


def test_upload_mode_rules() -> None:
    patterns = lfs_patterns(INITIAL_GITATTRIBUTES)
    assert upload_mode("notes.txt", 100, b"hello", patterns) == "regular"
    assert upload_mode("notes.txt", LFS_SIZE_THRESHOLD + 1, b"hello", patterns) == "lfs"
    assert upload_mode("blob.dat", 100, b"ab\0cd", patterns) == "lfs"
    assert upload_mode("sub/model.safetensors", 10, b"{}", patterns) == "lfs"
    assert upload_mode("data/train-00000.parquet", 10, b"PAR1", patterns) == "lfs"


def test_git_blob_sha1_matches_git() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


# -- round trip ------------------------------------------------------------------------------


def test_round_trip_with_lfs_regular_and_nested_files(tmp_path: Path) -> None:
    big = text_bytes(LFS_SIZE_THRESHOLD + 4096)
    files = {
        "README.md": b"---\nlicense: mit\n---\n# model\n",
        "config.json": b'{"hidden_size": 8}',
        "model.safetensors": os.urandom(3000),
        "logs/trainer.log": big,
        "sub/deeper/a b%20c.txt": b"odd name",
    }
    stage = write_tree(tmp_path / "stage", files)
    with running_hub(tmp_path / "hub", token=new_token(), tree_page_size=2) as server:
        api = api_for(server)
        url = api.create_repo("team/model-a", private=True)
        assert url.repo_id == "team/model-a"
        commit = api.upload_folder(repo_id="team/model-a", folder_path=stage, commit_message="publish").oid
        kinds = [r["kind"] for r in server.requests()]
        assert kinds[:5] == ["create", "validate_yaml", "validate_yaml", "preupload", "lfs_batch"]
        assert sorted(kinds[5:-1]) == ["lfs_put", "lfs_put", "lfs_verify", "lfs_verify"] and kinds[-1] == "commit"

        info = api.repo_info("team/model-a", files_metadata=True)
        assert info.sha == commit and info.private is True
        siblings = {s.rfilename: s for s in info.siblings}
        assert set(siblings) == set(files) | {".gitattributes"}
        assert siblings["logs/trainer.log"].lfs.sha256 == hashlib.sha256(big).hexdigest()
        assert siblings["model.safetensors"].lfs is not None
        assert siblings["config.json"].lfs is None
        assert siblings["config.json"].blob_id == git_blob_sha1(files["config.json"])

        # tree pages of 2 entries: the client follows the Link header to the end
        server.clear_requests()
        listed = {e.path for e in api.list_repo_tree("team/model-a", recursive=True)}
        assert listed == set(files) | {".gitattributes", "logs", "sub", "sub/deeper"}
        assert len([r for r in server.requests() if r["kind"] == "tree"]) == (len(listed) + 1) // 2
        assert {e.path for e in api.list_repo_tree("team/model-a", path_in_repo="sub/deeper")} == {
            "sub/deeper/a b%20c.txt"}

        out = snapshot_download("team/model-a", revision=commit, local_dir=tmp_path / "dl",
                                endpoint=server.url, token=server.token)
        for rel, data in files.items():
            assert (Path(out) / rel).read_bytes() == data, rel

        meta = api.get_hf_file_metadata(url=f"{server.url}/team/model-a/resolve/main/logs/trainer.log")
        assert meta.etag == hashlib.sha256(big).hexdigest() and meta.size == len(big)
        assert meta.commit_hash == commit
        meta = api.get_hf_file_metadata(url=f"{server.url}/team/model-a/resolve/main/config.json")
        assert meta.etag == git_blob_sha1(files["config.json"])



def test_identical_upload_makes_no_commit(hub_server, tmp_path: Path) -> None:
    stage = write_tree(tmp_path / "stage", {"a.txt": b"a", "w.safetensors": b"\0" * 100})
    api = api_for(hub_server)
    api.create_repo("team/same")
    first = api.upload_folder(repo_id="team/same", folder_path=stage, commit_message="one").oid
    hub_server.clear_requests()
    second = api.upload_folder(repo_id="team/same", folder_path=stage, commit_message="two").oid
    assert second == first
    assert [r for r in hub_server.requests() if r["kind"] in {"commit", "lfs_put"}] == []
    assert len(api.list_repo_commits("team/same")) == 2  # initial commit + one upload


def test_multipart_lfs_upload(tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024 + 123)
    with running_hub(tmp_path / "hub", token=new_token(), multipart_threshold=1024 * 1024,
                     chunk_size=1024 * 1024) as server:
        api = api_for(server)
        api.create_repo("team/parts")
        (tmp_path / "w.bin").write_bytes(data)
        api.upload_file(path_or_fileobj=str(tmp_path / "w.bin"), path_in_repo="w.bin", repo_id="team/parts")
        parts = [r for r in server.requests() if r["method"] == "PUT" and "/part/" in r["path"]]
        assert len(parts) == 3
        assert Path(api.hf_hub_download("team/parts", "w.bin", local_dir=tmp_path / "dl")).read_bytes() == data


def test_create_repo_conflict_carries_url(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/dup", repo_type="dataset")
    assert api.create_repo("team/dup", repo_type="dataset", exist_ok=True).endswith("/datasets/team/dup")
    with pytest.raises(HfHubHTTPError) as caught:
        api.create_repo("team/dup", repo_type="dataset")
    assert caught.value.response.status_code == 409
    files = api.list_repo_files("team/dup", repo_type="dataset")
    assert files == [".gitattributes"]


def test_delete_repo_removes_every_byte(hub_server, tmp_path: Path) -> None:
    api = api_for(hub_server)
    api.create_repo("team/gone")
    api.upload_file(path_or_fileobj=b"secret-ish", path_in_repo="f.txt", repo_id="team/gone", commit_message="x")
    assert any(repo == "team/gone" for repo, _, _ in stored_blobs(hub_server.root))
    api.delete_repo("team/gone")
    assert not api.repo_exists("team/gone")
    assert not any(repo == "team/gone" for repo, _, _ in stored_blobs(hub_server.root))


# -- commits -----------------------------------------------------------------------------------


def test_parent_commit_mismatch_is_refused(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/race")
    old = api.repo_info("team/race").sha
    new = api.upload_file(path_or_fileobj=b"1", path_in_repo="one.txt", repo_id="team/race").oid
    with pytest.raises(HfHubHTTPError) as caught:
        api.create_commit("team/race", [CommitOperationAdd("two.txt", b"2")], commit_message="late",
                          parent_commit=old)
    assert caught.value.response.status_code == 412
    assert api.repo_info("team/race").sha == new
    assert api.list_repo_files("team/race") == [".gitattributes", "one.txt"]


def test_commit_is_all_or_nothing(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/atomic")
    head = api.repo_info("team/atomic").sha
    with pytest.raises(HfHubHTTPError) as caught:
        api.create_commit("team/atomic", [CommitOperationAdd("new.txt", b"n"), CommitOperationDelete("absent.txt")],
                          commit_message="half")
    assert caught.value.response.status_code == 404
    assert api.repo_info("team/atomic").sha == head
    assert not api.file_exists("team/atomic", "new.txt")


def test_delete_file_and_folder(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/del", repo_type="dataset")
    api.create_commit("team/del", [CommitOperationAdd(p, b"x" + p.encode()) for p in
                                   ("data/a.parquet", "data/b.parquet", "old/x.txt", "old/y/z.txt", "keep.md")],
                      commit_message="seed", repo_type="dataset")
    api.create_commit("team/del", [CommitOperationDelete("data/a.parquet"), CommitOperationDelete("old/")],
                      commit_message="prune", repo_type="dataset")
    assert api.list_repo_files("team/del", repo_type="dataset") == [".gitattributes", "data/b.parquet", "keep.md"]


def test_invalid_readme_metadata_is_rejected(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/card")
    with pytest.raises((ValueError, HfHubHTTPError)):
        api.upload_file(path_or_fileobj=b"---\nlicense: [mit\n---\n", path_in_repo="README.md", repo_id="team/card")
    assert not api.file_exists("team/card", "README.md")


def test_paths_info_is_form_encoded_and_omits_missing(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/pi")
    api.upload_file(path_or_fileobj=b"x", path_in_repo="d/e.txt", repo_id="team/pi")
    found = api.get_paths_info("team/pi", ["d", "d/e.txt", "nope.txt"])
    assert sorted(entry.path for entry in found) == ["d", "d/e.txt"]


# -- raw protocol details ------------------------------------------------------------------------


def test_range_requests_and_download_headers(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/range")
    data = bytes(range(256)) * 4
    commit = api.upload_file(path_or_fileobj=data, path_in_repo="blob.bin", repo_id="team/range").oid
    headers = {"authorization": f"Bearer {hub_server.token}"}
    url = f"{hub_server.url}/team/range/resolve/main/blob.bin"
    with httpx2.Client() as client:
        partial = client.get(url, headers={**headers, "Range": "bytes=1000-"})
        assert partial.status_code == 206 and partial.content == data[1000:]
        assert partial.headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
        tail = client.get(url, headers={**headers, "Range": "bytes=-5"})
        assert tail.content == data[-5:]
        head = client.head(url, headers=headers)
        assert head.headers["X-Repo-Commit"] == commit
        assert head.headers["X-Linked-Size"] == str(len(data))
        assert head.headers["ETag"].strip('"') == hashlib.sha256(data).hexdigest()
        missing = client.head(f"{hub_server.url}/team/range/resolve/main/nope", headers=headers)
        assert missing.status_code == 404 and missing.headers["X-Error-Code"] == "EntryNotFound"
        assert client.get(url, headers={**headers, "Range": "bytes=5000-"}).status_code == 416


def test_lfs_put_needs_a_valid_signature_and_matching_content(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/lfs")
    data = b"\0payload"
    oid = hashlib.sha256(data).hexdigest()
    headers = {"authorization": f"Bearer {hub_server.token}"}
    with httpx2.Client() as client:
        batch = client.post(f"{hub_server.url}/team/lfs.git/info/lfs/objects/batch", headers=headers, json={
            "operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]}).json()
        href = batch["objects"][0]["actions"]["upload"]["href"]
        assert client.put(href.split("?")[0], content=data).status_code == 403
        assert client.put(href, content=b"\0tampered").status_code == 400
        assert client.put(href, content=data).status_code == 200
        again = client.post(f"{hub_server.url}/team/lfs.git/info/lfs/objects/batch", headers=headers, json={
            "operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}).json()
        assert "actions" not in again["objects"][0]  # already stored: the client skips the upload


def test_in_lfs_mode_xet_token_endpoints_answer_501_and_a_client_uploading_by_xet_fails_loudly(
        hub_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = api_for(hub_server)
    api.create_repo("team/xet")
    with httpx2.Client() as client:
        answer = client.get(f"{hub_server.url}/api/models/team/xet/xet-write-token/main",
                            headers={"authorization": f"Bearer {hub_server.token}"})
    assert answer.status_code == 501 and "it has no Xet storage" in answer.json()["error"]
    assert "no Xet storage" in answer.headers["X-Error-Message"]  # what rlkeep.hub.transfer logs
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    (tmp_path / "w.safetensors").write_bytes(b"\0" * 100)
    with pytest.raises(Exception, match="501"):
        api.upload_file(path_or_fileobj=str(tmp_path / "w.safetensors"), path_in_repo="w.safetensors",
                        repo_id="team/xet")
    assert not api.file_exists("team/xet", "w.safetensors")


def test_in_xet_mode_the_unmodified_client_uploads_and_downloads_by_xet_and_plain_http_serves_the_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    weights = os.urandom(LFS_SIZE_THRESHOLD + 4096)
    stage = write_tree(tmp_path / "stage", {"w.safetensors": weights, "config.json": b'{"a": 1}'})
    with running_hub(tmp_path / "hub", token=new_token(), xet=True) as server:
        api = api_for(server)
        api.create_repo("team/xet")
        operations = [CommitOperationAdd(name, str(stage / name)) for name in ("w.safetensors", "config.json")]
        commit = api.create_commit("team/xet", operations, commit_message="by xet").oid
        kinds = [entry["kind"] for entry in server.requests()]
        assert "xet_token" in kinds and "lfs_batch" not in kinds and "lfs_put" not in kinds
        assert server.xet.received_bytes() >= len(weights)  # the bytes went to the CAS, not by LFS
        entry = next(e for e in api.list_repo_tree("team/xet", revision=commit) if e.path == "w.safetensors")
        assert entry.lfs.sha256 == hashlib.sha256(weights).hexdigest() and entry.xet_hash
        head = httpx2.head(f"{server.url}/team/xet/resolve/{commit}/w.safetensors",
                           headers={"authorization": f"Bearer {server.token}"})
        assert head.headers["X-Xet-Hash"] == entry.xet_hash and 'rel="xet-auth"' in head.headers["Link"]
        server.clear_requests()
        fresh = Path(snapshot_download("team/xet", revision=commit, local_dir=tmp_path / "fresh", endpoint=server.url,
                                       token=server.token))
        assert (fresh / "w.safetensors").read_bytes() == weights
        assert "xet_read" in [entry["kind"] for entry in server.requests()]
        plain = httpx2.get(f"{server.url}/team/xet/resolve/{commit}/w.safetensors",
                           headers={"authorization": f"Bearer {server.token}"})
        assert plain.content == weights  # the commit put the file in the LFS store: scans see its bytes
        assert any(path == "w.safetensors" and data == weights for _, path, data in stored_blobs(server.root))


# -- auth ----------------------------------------------------------------------------------------


def test_wrong_token_is_rejected_and_private_repos_hidden_from_anonymous(hub_server, tmp_path: Path) -> None:
    owner = api_for(hub_server)
    owner.create_repo("team/secret", private=True)
    owner.create_repo("team/open", private=False)
    assert owner.whoami()["name"] == "rlkeep-dev"
    wrong = api_for(hub_server, token="not-the-token")
    with pytest.raises(HfHubHTTPError) as caught:
        wrong.repo_info("team/open")
    assert caught.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError):
        wrong.whoami()
    anonymous = api_for(hub_server, token=False)
    assert anonymous.repo_info("team/open").private is False
    with pytest.raises(RepositoryNotFoundError):
        anonymous.repo_info("team/secret")
    with pytest.raises(HfHubHTTPError) as caught:
        anonymous.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="team/open")
    assert caught.value.response.status_code == 401
    assert owner.list_repo_files("team/open") == [".gitattributes"]


# -- faults, request log, admin edits -------------------------------------------------------------


def test_injected_commit_fault_then_recovery(hub_server, tmp_path: Path) -> None:
    api = api_for(hub_server)
    api.create_repo("team/fault")
    head = api.repo_info("team/fault").sha
    hub_server.fail_next("commit", 1)
    with pytest.raises(HfHubHTTPError) as caught:
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="team/fault")
    assert caught.value.response.status_code == 500
    assert api.repo_info("team/fault").sha == head
    assert api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="team/fault").oid != head
    statuses = [r["status"] for r in hub_server.requests() if r["kind"] == "commit"]
    assert statuses == [500, 200]


def test_admin_http_endpoints(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/admin")
    headers = {"authorization": f"Bearer {hub_server.token}"}
    with httpx2.Client(base_url=hub_server.url, headers=headers) as client:
        assert client.post("/_admin/faults", json={"kind": "download", "count": 2, "status": 503}).status_code == 200
        assert client.get("/team/admin/resolve/main/.gitattributes").status_code == 503
        assert client.get("/team/admin/resolve/main/.gitattributes").status_code == 503
        assert client.get("/team/admin/resolve/main/.gitattributes").status_code == 200
        log = client.get("/_admin/requests").json()
        assert [r["status"] for r in log if r["kind"] == "download"] == [503, 503, 200]
        edit = client.post("/_admin/edit", json={"repo_id": "team/admin", "path": "n.txt",
                                                  "content_b64": base64.b64encode(b"hi").decode()})
        assert edit.json()["commitOid"] == api.repo_info("team/admin").sha
        assert httpx2.post(f"{hub_server.url}/_admin/faults", json={"kind": "commit"}).status_code == 401


def test_edit_file_commits_as_someone_else(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/edited")
    api.upload_file(path_or_fileobj=b"# card\n", path_in_repo="README.md", repo_id="team/edited")
    sha = hub_server.edit_file("team/edited", "README.md", b"# changed remotely\n")
    commits = api.list_repo_commits("team/edited")
    assert commits[0].commit_id == sha and commits[0].authors == ["someone-else"]
    path = api.hf_hub_download("team/edited", "README.md", local_dir=hub_server.root.parent / "dl")
    assert Path(path).read_bytes() == b"# changed remotely\n"


# -- stored bytes and process mode -------------------------------------------------------------


def test_stored_blobs_covers_history_unreferenced_objects_and_metadata(hub_server) -> None:
    api = api_for(hub_server)
    api.create_repo("team/scan", repo_type="dataset")
    api.upload_file(path_or_fileobj=b"v1 marker-one", path_in_repo="f.txt", repo_id="team/scan", repo_type="dataset",
                    commit_message="commit-message-marker")
    api.upload_file(path_or_fileobj=b"v2", path_in_repo="f.txt", repo_id="team/scan", repo_type="dataset")
    orphan = CommitOperationAdd("never-committed.bin", b"\0orphan-marker")
    api.preupload_lfs_files("team/scan", [orphan], repo_type="dataset")
    blobs = list(stored_blobs(hub_server.root))
    assert all(repo == "datasets/team/scan" for repo, _, _ in blobs)
    assert ("datasets/team/scan", "f.txt", b"v1 marker-one") in blobs  # overwritten, still held
    assert any(path.startswith("<unreferenced lfs") and data == b"\0orphan-marker" for _, path, data in blobs)
    assert any(b"commit-message-marker" in data for _, path, data in blobs if path.startswith("<metadata"))


def test_server_process_persists_state_and_stops_on_sigterm(tmp_path: Path) -> None:
    token = new_token()
    first = start_hub_process(tmp_path / "hub", token=token)
    try:
        api = HfApi(endpoint=first.url, token=token)
        api.create_repo("team/persist", private=True)
        api.upload_file(path_or_fileobj=b"kept", path_in_repo="k.txt", repo_id="team/persist")
    finally:
        assert first.stop() == 0
    assert first.process.returncode == 0 and first.pid != os.getpid()
    second = start_hub_process(tmp_path / "hub", token=token)
    try:
        api = HfApi(endpoint=second.url, token=token)
        assert api.repo_info("team/persist").private is True
        path = api.hf_hub_download("team/persist", "k.txt", local_dir=tmp_path / "dl")
        assert Path(path).read_bytes() == b"kept"
        with pytest.raises(HfHubHTTPError):
            HfApi(endpoint=second.url, token="wrong").repo_info("team/persist")
    finally:
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(timeout=10) == 0
    assert json.loads((tmp_path / "hub.ready.json").read_text())["url"] == second.url
