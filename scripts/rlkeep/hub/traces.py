"""Trace dataset publication: one commit that adds the staged shards, manifest and dataset card
and deletes remote data/train-*.parquet shards absent from staging (the shard set is replaced,
nothing else is touched), and its verification against main.
"""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile

from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.hub.client import (
    HubTarget, check_repo_id, ensure_repo, head_of, history_problems, require_dir, resolve_target,
)
from rlkeep.hub.failures import hub_step
from rlkeep.hub.transfer import commit_files
from rlkeep.hub.trees import CARD_NAME, FileDigest, git_blob_sha1_file, staged_files

MANIFEST_NAME = "trace_export_manifest.json"
TRAIN_SHARD_RE = re.compile(r"^data/train-[^/]*\.parquet$")
DATA_SHARD_RE = re.compile(r"^data/[^/]+\.parquet$")


def _staged_traces(stage_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """(staged files, shard paths) after checking the staging holds exactly a trace export."""
    require_dir(stage_dir, "trace staging")
    files = staged_files(stage_dir)
    if MANIFEST_NAME not in files:
        raise RlkeepError(f"{stage_dir / MANIFEST_NAME}: missing; the trace staging has no export manifest")
    shards = sorted(rel for rel in files if DATA_SHARD_RE.fullmatch(rel))
    if not any(TRAIN_SHARD_RE.fullmatch(rel) for rel in shards):
        raise RlkeepError(f"{stage_dir}: no data/train-*.parquet shard to publish")
    unexpected = sorted(files.keys() - set(shards) - {MANIFEST_NAME, CARD_NAME})
    if unexpected:
        raise RlkeepError(f"{stage_dir}: trace staging holds files that are not part of a trace export: "
                          f"{', '.join(unexpected)}")
    return files, shards


def replace_trace_shards(stage_dir: Path, repo_id: str, *, private: bool, endpoint: str | None = None,
                         token: str | None = None, commit_message: str) -> dict[str, Any]:
    """One commit: add the staged data/*.parquet and manifest, delete remote data/train-*.parquet
    shards absent from staging, nothing else. Identical content makes no commit (no_op).
    """
    stage_dir = Path(stage_dir)
    files, shards = _staged_traces(stage_dir)
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "dataset", private)
    head = head_of(api, target, repo_id, "dataset")
    with hub_step(target, "dataset", repo_id, "file listing"):
        remote = api.list_repo_files(repo_id, repo_type="dataset", revision=head)
    stale = sorted(path for path in remote if TRAIN_SHARD_RE.fullmatch(path) and path not in files)
    uploads = shards + [name for name in (CARD_NAME,) if name in files] + [MANIFEST_NAME]
    note = f"Staging {stage_dir} is untouched and the remote shard set unchanged; rerunning completes it"
    info = commit_files(api, target, repo_id, "dataset", {rel: files[rel] for rel in uploads}, deletes=stale,
                        commit_message=commit_message, parent_commit=head, step="commit", note=note)
    return {"repo_id": repo_id, "repo_type": "dataset", "commit": info.oid, "created": created,
            "private": is_private, "no_op": info.oid == head, "uploaded": uploads, "deleted": stale}


def verify_trace_publication(stage_dir: Path, repo_id: str, commit: str, *, endpoint: str | None = None,
                             token: str | None = None) -> dict[str, Any]:
    """Main's data/train-*.parquet set equals staging's exactly, every staged shard matches in size
    and hash, and the remote manifest read back equals the staged one. Returns the evidence.
    """
    stage_dir = Path(stage_dir)
    files, shards = _staged_traces(stage_dir)
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "dataset")
    problems = history_problems(api, target, repo_id, "dataset", commit, head)
    with hub_step(target, "dataset", repo_id, "tree listing"):
        remote = {entry.path: entry for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=head,
                                                                     recursive=True) if isinstance(entry, RepoFile)}
    remote_train = {path for path in remote if TRAIN_SHARD_RE.fullmatch(path)}
    staged_train = {path for path in shards if TRAIN_SHARD_RE.fullmatch(path)}
    problems += [f"{path}: staged shard missing from the Hub" for path in sorted(staged_train - remote_train)]
    problems += [f"{path}: stale shard on the Hub (not in staging)" for path in sorted(remote_train - staged_train)]
    evidence_shards = []
    for rel in shards:
        local = FileDigest(files[rel].stat().st_size, sha256_file(files[rel]))
        evidence_shards.append({"path": rel, "size": local.size, "sha256": local.sha256})
        problems += _remote_file_problems(rel, files[rel], local, remote.get(rel))
    if CARD_NAME in files:  # the dataset card the export wrote: same bytes on the Hub
        card = FileDigest(files[CARD_NAME].stat().st_size, sha256_file(files[CARD_NAME]))
        problems += _remote_file_problems(CARD_NAME, files[CARD_NAME], card, remote.get(CARD_NAME))
    problems += _manifest_problems(api, target, repo_id, head, files[MANIFEST_NAME])
    if problems:
        raise RlkeepError(target.scrub(
            f"dataset repo {repo_id} at {target.endpoint} failed verification (main at {head}, published "
            f"{commit}):\n" + "\n".join(f"  - {problem}" for problem in problems)))
    return {
        "status": "completed", "repo_id": repo_id, "repo_type": "dataset", "commit": commit,
        "verified_commit": head, "url": target.repo_url(repo_id, "dataset"), "shards": evidence_shards,
        "manifest": {"path": MANIFEST_NAME, "sha256": sha256_file(files[MANIFEST_NAME])},
    }


def _remote_file_problems(rel: str, path: Path, local: FileDigest, entry: RepoFile | None) -> list[str]:
    if entry is None:
        return [] if TRAIN_SHARD_RE.fullmatch(rel) else [f"{rel}: staged file missing from the Hub"]
    if entry.size != local.size:
        return [f"{rel}: size differs (staging {local.size} bytes, Hub {entry.size} bytes)"]
    if entry.lfs is not None:
        if entry.lfs.sha256 != local.sha256:
            return [f"{rel}: sha256 differs (staging {local.sha256}, Hub LFS oid {entry.lfs.sha256})"]
    elif entry.blob_id != git_blob_sha1_file(path):
        return [f"{rel}: content differs (git blob id on the Hub {entry.blob_id})"]
    return []


def _manifest_problems(api: HfApi, target: HubTarget, repo_id: str, head: str, staged: Path) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="rlkeep-manifest-") as scratch:
        try:
            with hub_step(target, "dataset", repo_id, f"download of {MANIFEST_NAME}"):
                local = api.hf_hub_download(repo_id, MANIFEST_NAME, repo_type="dataset", revision=head,
                                            local_dir=scratch)
        except RlkeepError as error:
            return [f"{MANIFEST_NAME}: cannot be read back from the Hub ({error})"]
        remote_bytes = Path(local).read_bytes()
    staged_bytes = staged.read_bytes()
    if remote_bytes == staged_bytes:
        return []
    try:
        if json.loads(remote_bytes) == json.loads(staged_bytes):
            return []
    except ValueError:
        pass
    return [f"{MANIFEST_NAME}: the Hub copy differs from the staged one "
            f"(sha256 Hub {hashlib.sha256(remote_bytes).hexdigest()}, staging {hashlib.sha256(staged_bytes).hexdigest()})"]
