"""The server's persistent state under its root: repos, commits, regular blobs and LFS objects,
written under one lock so a commit applies fully or not at all, and `stored_blobs`, which yields
every stored byte for secret scans.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep_dev.devserver.hub.protocol import (
    INITIAL_GITATTRIBUTES, SHA1_RE, SHA256_RE, HubError, RepoRef, check_repo_path, directories_of, git_blob_sha1,
    lfs_pointer, now_iso,
)


class HubStore:
    """Repos, commits and objects under `root`; writes are serialised by one lock."""

    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        (self.root / "incoming").mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self._commit_cache: dict[tuple[Path, str], dict[str, Any]] = {}

    # -- repos ------------------------------------------------------------------------------
    def repo_dir(self, ref: RepoRef) -> Path:
        namespace, name = ref.repo_id.split("/")
        return self.root / "repos" / f"{ref.repo_type}s" / namespace / name

    def load_repo(self, ref: RepoRef) -> dict[str, Any]:
        try:
            return read_json(self.repo_dir(ref) / "repo.json")
        except FileNotFoundError:
            raise HubError(404, "Repository not found", "RepoNotFound") from None

    def repo_exists(self, ref: RepoRef) -> bool:
        return (self.repo_dir(ref) / "repo.json").is_file()

    def create_repo(self, ref: RepoRef, private: bool, author: str) -> bool:
        """Create the repo with an initial `.gitattributes` commit; False when it already exists."""
        with self.lock:
            if self.repo_exists(ref):
                return False
            directory = self.repo_dir(ref)
            if directory.exists():  # leftover of a crash between mkdir and repo.json: start clean
                shutil.rmtree(directory)
            for sub in ("commits", "blobs", "lfs"):
                (directory / sub).mkdir(parents=True, exist_ok=True)
            content = INITIAL_GITATTRIBUTES.encode()
            files = {".gitattributes": self._store_regular(directory, content)}
            sha = self._write_commit(directory, None, files, "initial commit", "", author)
            write_json(directory / "repo.json", {
                "type": ref.repo_type, "id": ref.repo_id, "private": private,
                "created_at": now_iso(), "branches": {"main": sha}, "tags": {},
            })
            return True

    def delete_repo(self, ref: RepoRef) -> None:
        with self.lock:
            self.load_repo(ref)
            directory = self.repo_dir(ref)
            trash = self.root / "incoming" / f"deleted-{uuid.uuid4().hex}"
            os.replace(directory, trash)  # the repo disappears atomically, then the bytes go
            shutil.rmtree(trash)
            self._commit_cache = {k: v for k, v in self._commit_cache.items() if k[0] != directory}

    def create_branch(self, ref: RepoRef, branch: str, starting_point: str | None) -> None:
        with self.lock:
            repo = self.load_repo(ref)
            if branch in repo["branches"]:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            repo["branches"][branch] = self.resolve(ref, starting_point or "main")
            write_json(self.repo_dir(ref) / "repo.json", repo)

    # -- reading ------------------------------------------------------------------------------
    def resolve(self, ref: RepoRef, revision: str) -> str:
        repo = self.load_repo(ref)
        name = revision.removeprefix("refs/heads/")
        if name in repo["branches"]:
            return repo["branches"][name]
        tag = revision.removeprefix("refs/tags/")
        if tag in repo["tags"]:
            return repo["tags"][tag]
        if SHA1_RE.fullmatch(revision) and (self.repo_dir(ref) / "commits" / f"{revision}.json").is_file():
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def commit(self, ref: RepoRef, sha: str) -> dict[str, Any]:
        directory = self.repo_dir(ref)
        key = (directory, sha)
        if key not in self._commit_cache:
            self._commit_cache[key] = read_json(directory / "commits" / f"{sha}.json")
        return self._commit_cache[key]

    def files_at(self, ref: RepoRef, sha: str) -> dict[str, dict[str, Any]]:
        return self.commit(ref, sha)["files"]

    def content_path(self, ref: RepoRef, entry: dict[str, Any]) -> Path:
        directory = self.repo_dir(ref)
        if "lfs" in entry:
            return directory / "lfs" / entry["lfs"]["sha256"]
        return directory / "blobs" / entry["oid"]

    def lfs_object_path(self, ref: RepoRef, sha256: str) -> Path:
        return self.repo_dir(ref) / "lfs" / sha256

    def has_lfs_object(self, ref: RepoRef, sha256: str, size: int | None) -> bool:
        path = self.lfs_object_path(ref, sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    # -- writing --------------------------------------------------------------------------------
    def _store_regular(self, directory: Path, content: bytes) -> dict[str, Any]:
        oid = git_blob_sha1(content)
        target = directory / "blobs" / oid
        if not target.exists():
            atomic_write_bytes(target, content)
        return {"oid": oid, "size": len(content)}

    def _write_commit(self, directory: Path, parent: str | None, files: dict[str, Any],
                      title: str, message: str, author: str) -> str:
        body = {"parent": parent, "files": files, "title": title, "message": message,
                "author": author, "date": now_iso(), "nonce": uuid.uuid4().hex}
        sha = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        write_json(directory / "commits" / f"{sha}.json", {"id": sha, **body})
        return sha

    def store_lfs_object(self, ref: RepoRef, sha256: str, size: int, chunks: Iterable[bytes]) -> None:
        """Stream an upload to disk, keep it only if its sha256 and size are the announced ones."""
        incoming = self.root / "incoming" / f"lfs-{uuid.uuid4().hex}"
        digest, written = hashlib.sha256(), 0
        try:
            with open(incoming, "wb") as handle:
                for chunk in chunks:
                    digest.update(chunk)
                    written += len(chunk)
                    handle.write(chunk)
            if digest.hexdigest() != sha256 or written != size:
                raise HubError(400, f"uploaded content does not match oid {sha256} and size {size} "
                                    f"(got sha256 {digest.hexdigest()}, {written} bytes)")
            self.load_repo(ref)
            os.replace(incoming, self.lfs_object_path(ref, sha256))
        finally:
            incoming.unlink(missing_ok=True)

    def apply_commit(self, ref: RepoRef, branch: str, summary: str, description: str,
                     parent_commit: str | None, operations: list[dict[str, Any]], author: str) -> str:
        """Validate every operation, then write the commit and move the branch: all or nothing.

        operations: {"op": "file", "path", "content": bytes} | {"op": "lfs", "path", "sha256",
        "size"?, "xet_hash"?} | {"op": "delete_file", "path"} | {"op": "delete_folder", "path"}.
        """
        if not summary.strip():
            raise HubError(400, "commit summary must not be empty")
        with self.lock:
            repo = self.load_repo(ref)
            if branch not in repo["branches"]:
                raise HubError(404, f"Invalid rev id: {branch} (commits go to a branch)", "RevisionNotFound")
            head = repo["branches"][branch]
            if parent_commit is not None and parent_commit != head:
                raise HubError(412, "A commit has happened since. Please refresh and try again. "
                                    f"(parentCommit {parent_commit}, {branch} is at {head})")
            directory = self.repo_dir(ref)
            files = dict(self.files_at(ref, head))
            pending_blobs: dict[str, bytes] = {}
            for operation in operations:
                self._apply_operation(ref, files, operation, pending_blobs)
            conflict = set(files) & directories_of(files)
            if conflict:
                raise HubError(400, f"path is both a file and a folder: {sorted(conflict)[0]}")
            for oid, content in pending_blobs.items():
                target = directory / "blobs" / oid
                if not target.exists():
                    atomic_write_bytes(target, content)
            sha = self._write_commit(directory, head, files, summary, description, author)
            repo["branches"][branch] = sha
            write_json(directory / "repo.json", repo)
            return sha

    def _apply_operation(self, ref: RepoRef, files: dict[str, Any], operation: dict[str, Any],
                         pending_blobs: dict[str, bytes]) -> None:
        """Apply one commit operation to `files` (the new commit's file map); a refused one raises HubError."""
        path = operation["path"]
        kind = operation["op"]
        if kind == "delete_folder":
            prefix = path.rstrip("/") + "/"
            doomed = [p for p in files if p.startswith(prefix)]
            if not doomed:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
            for doomed_path in doomed:
                del files[doomed_path]
            return
        problem = check_repo_path(path)
        if problem:
            raise HubError(400, problem)
        if kind == "delete_file":
            if path not in files:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            del files[path]
        elif kind == "file":
            content = operation["content"]
            oid = git_blob_sha1(content)
            pending_blobs[oid] = content
            files[path] = {"oid": oid, "size": len(content)}
        elif kind == "lfs":
            sha256, size = operation["sha256"], operation.get("size")
            if not SHA256_RE.fullmatch(sha256) or not self.has_lfs_object(ref, sha256, size):
                raise HubError(400, f"Your push was rejected because an LFS pointer pointed to a file "
                                    f"that does not exist: {path} (oid {sha256})")
            size = self.lfs_object_path(ref, sha256).stat().st_size
            pointer = lfs_pointer(sha256, size)
            files[path] = {"oid": git_blob_sha1(pointer), "size": size,
                           "lfs": {"sha256": sha256, "size": size, "pointerSize": len(pointer)}}
            if operation.get("xet_hash"):  # uploaded by Xet: downloads may take Xet too
                files[path]["xetHash"] = operation["xet_hash"]
        else:
            raise HubError(400, f"unknown commit operation {kind!r}")

    def history(self, ref: RepoRef, sha: str) -> Iterator[dict[str, Any]]:
        current: str | None = sha
        while current is not None:
            commit = self.commit(ref, current)
            yield commit
            current = commit["parent"]


def stored_blobs(root: str | os.PathLike[str]) -> Iterator[tuple[str, str, bytes]]:
    """Yield (repo, path, content) for every byte the server at `root` holds.

    repo is the Hub URL path (`ns/name` for models, `datasets/ns/name`, `spaces/ns/name`).
    First every file version reachable from any commit (history included, deduplicated by
    path and content), then stored objects no commit references (`<unreferenced lfs|blob ID>`),
    then the metadata files themselves (`<metadata commits/SHA.json>`: commit messages, flags).
    Uploads still in flight are reported under repo '' as `<incoming NAME>`.
    """
    root = Path(root)
    for type_dir in sorted((root / "repos").glob("*")):
        repo_type = type_dir.name.removesuffix("s")
        for repo_dir in sorted(p for p in type_dir.glob("*/*") if p.is_dir()):
            ref = RepoRef(repo_type, f"{repo_dir.parent.name}/{repo_dir.name}")
            referenced: set[Path] = set()
            seen: set[tuple[str, str]] = set()
            for commit_file in sorted((repo_dir / "commits").glob("*.json")):
                for path, entry in read_json(commit_file)["files"].items():
                    content_path = (repo_dir / "lfs" / entry["lfs"]["sha256"]) if "lfs" in entry \
                        else (repo_dir / "blobs" / entry["oid"])
                    referenced.add(content_path)
                    if (path, entry["oid"]) in seen or not content_path.is_file():
                        continue
                    seen.add((path, entry["oid"]))
                    yield ref.display, path, content_path.read_bytes()
            for kind, directory in (("lfs", "lfs"), ("blob", "blobs")):
                for object_path in sorted((repo_dir / directory).glob("*")):
                    if object_path.is_file() and object_path not in referenced:
                        yield ref.display, f"<unreferenced {kind} {object_path.name}>", object_path.read_bytes()
            for meta in sorted([repo_dir / "repo.json", *(repo_dir / "commits").glob("*.json")]):
                if meta.is_file():
                    yield ref.display, f"<metadata {meta.relative_to(repo_dir).as_posix()}>", meta.read_bytes()
    for leftover in sorted((root / "incoming").rglob("*")):
        if leftover.is_file():
            yield "", f"<incoming {leftover.relative_to(root / 'incoming').as_posix()}>", leftover.read_bytes()
