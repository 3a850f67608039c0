"""A Hugging Face Hub-compatible HTTP server for tests and `make demo`.

It speaks the subset of the Hub protocol that huggingface_hub 2.4 uses to create repos, upload
(preupload -> LFS batch/PUT/verify -> NDJSON commit), list, and download (see
docs/reference.md, Hub protocol). It has no Xet storage: the `xet-*-token` endpoints
answer 501, so every client must run with `HF_HUB_DISABLE_XET=1` (or set
`huggingface_hub.constants.HF_HUB_DISABLE_XET = True`); otherwise uploads of LFS-sized files fail
loudly instead of silently taking another path.

State lives under a root directory so other processes and tests can inspect it:

    <root>/repos/<type>s/<ns>/<name>/repo.json          private flag, branches, tags
    <root>/repos/<type>s/<ns>/<name>/commits/<sha>.json  parent, message, full file map
    <root>/repos/<type>s/<ns>/<name>/blobs/<git-sha1>    regular file contents
    <root>/repos/<type>s/<ns>/<name>/lfs/<sha256>        LFS object contents
    <root>/incoming/                                     uploads in flight

A commit is written first and the branch moves afterwards with one atomic rename of
repo.json, so a commit applies fully or not at all. `stored_blobs(root)` enumerates every stored
byte (file contents, unreferenced objects, metadata) for secret scans.

Run as a process: `python -m rlkeep_dev.devserver.hub --root DIR [--port 0] [--token T]
--ready-file F` writes {"url", "pid"} to F once listening and stops cleanly on SIGTERM.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import yaml

from rlkeep.jsonio import atomic_write_bytes, read_json, write_json

LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # larger files are LFS, as on the Hub
DEFAULT_MULTIPART_THRESHOLD = 64 * 1024 * 1024
DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024
DEFAULT_TREE_PAGE_SIZE = 1000
DEFAULT_USER = "rlkeep-dev"
REPO_TYPES = ("model", "dataset", "space")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
FAULT_KINDS = (
    "create", "delete_repo", "info", "tree", "paths_info", "preupload", "lfs_batch", "lfs_put",
    "lfs_verify", "commit", "download", "validate_yaml",
)
XET_MESSAGE = (
    "This Hub-compatible test server has no Xet storage. Run the client with HF_HUB_DISABLE_XET=1 "
    "(or huggingface_hub.constants.HF_HUB_DISABLE_XET = True) so uploads use the LFS protocol."
)
INITIAL_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib",
        "*.lfs.*", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot",
        "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors",
        "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
        "*.zst", "*tfevents*",
    )
)


# ---------------------------------------------------------------------------------------------
# Pure helpers


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub reports as `oid`/ETag for regular files."""
    return hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def lfs_patterns(gitattributes: str) -> list[str]:
    """Patterns that `.gitattributes` routes through LFS (`filter=lfs`)."""
    patterns = []
    for line in gitattributes.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def matches_lfs_pattern(path: str, patterns: Iterable[str]) -> bool:
    basename = path.rsplit("/", 1)[-1]
    for pattern in patterns:
        if "/" in pattern.strip("/"):
            if fnmatch.fnmatchcase(path, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(basename, pattern.strip("/")):
            return True
    return False


def upload_mode(path: str, size: int, sample: bytes, patterns: Iterable[str]) -> str:
    """`lfs` for large files, binary samples or `.gitattributes` LFS patterns, as the Hub decides."""
    if size > LFS_SIZE_THRESHOLD or b"\0" in sample or matches_lfs_pattern(path, patterns):
        return "lfs"
    return "regular"


def split_raw_path(raw_path: str) -> list[str]:
    """Split on '/' before unquoting, so `refs%2Fpr%2F1` and `sub%2Fdir` stay one segment."""
    return [unquote(segment) for segment in raw_path.split("/")[1:]]


def check_repo_path(path: str) -> str | None:
    """Why `path` cannot be a file path in a repo, or None when it can."""
    if not path or path.startswith("/") or path.endswith("/"):
        return f"invalid path {path!r}: must be relative, non-empty and not end with '/'"
    segments = path.split("/")
    if any(segment in {"", ".", ".."} for segment in segments) or "\0" in path:
        return f"invalid path {path!r}: empty, '.' or '..' segment"
    if segments[0] == ".git":
        return f"invalid path {path!r}: '.git' is reserved"
    return None


def directories_of(paths: Iterable[str]) -> set[str]:
    """Every folder that holds a file of `paths`, at any depth."""
    return {path[: match.start()] for path in paths for match in re.finditer("/", path)}


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class RepoRef:
    repo_type: str  # model | dataset | space
    repo_id: str  # ns/name

    @property
    def url_prefix(self) -> str:
        return "" if self.repo_type == "model" else f"{self.repo_type}s/"

    @property
    def display(self) -> str:
        """How stored_blobs names the repo: the Hub URL path (`ns/name`, `datasets/ns/name`)."""
        return self.url_prefix + self.repo_id


class HubError(Exception):
    """A request the Hub would refuse: carries the HTTP status and the Hub error code."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 extra: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.extra = extra or {}
        self.headers = headers or {}


# ---------------------------------------------------------------------------------------------
# Persistent state


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
        "size"?} | {"op": "delete_file", "path"} | {"op": "delete_folder", "path"}.
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
                path = operation["path"]
                kind = operation["op"]
                if kind == "delete_folder":
                    prefix = path.rstrip("/") + "/"
                    doomed = [p for p in files if p.startswith(prefix)]
                    if not doomed:
                        raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for doomed_path in doomed:
                        del files[doomed_path]
                    continue
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
                else:
                    raise HubError(400, f"unknown commit operation {kind!r}")
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

    def history(self, ref: RepoRef, sha: str) -> Iterator[dict[str, Any]]:
        current: str | None = sha
        while current is not None:
            commit = self.commit(ref, current)
            yield commit
            current = commit["parent"]


# ---------------------------------------------------------------------------------------------
# Listing entries in Hub shapes


def file_entry(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": path}
    if "lfs" in entry:
        lfs = entry["lfs"]
        result["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
    return result


def directory_entry(path: str, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    prefix = path + "/"
    listing = sorted((p, e["oid"]) for p, e in files.items() if p.startswith(prefix))
    oid = hashlib.sha1(json.dumps(listing).encode()).hexdigest()
    return {"type": "directory", "oid": oid, "size": 0, "path": path}


def tree_entries(files: dict[str, dict[str, Any]], base: str, recursive: bool) -> list[dict[str, Any]]:
    """Entries under `base` ('' = root); raises EntryNotFound when `base` is not a folder."""
    directories = directories_of(files)
    if base and base not in directories:
        raise HubError(404, f"Entry not found: {base}", "EntryNotFound")
    prefix = base + "/" if base else ""

    def wanted(path: str) -> bool:
        if not path.startswith(prefix):
            return False
        return recursive or "/" not in path[len(prefix):]

    entries = [directory_entry(d, files) for d in sorted(directories) if wanted(d)]
    entries += [file_entry(p, files[p]) for p in sorted(files) if wanted(p)]
    return entries


def path_entry(files: dict[str, dict[str, Any]], path: str) -> dict[str, Any] | None:
    path = path.strip("/")
    if path in files:
        return file_entry(path, files[path])
    if path in directories_of(files):
        return directory_entry(path, files)
    return None


def sibling(path: str, entry: dict[str, Any], with_blobs: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"rfilename": path}
    if with_blobs:
        result.update({"size": entry["size"], "blobId": entry["oid"]})
        if "lfs" in entry:
            result["lfs"] = dict(entry["lfs"])
    return result


# ---------------------------------------------------------------------------------------------
# HTTP layer


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes on kept-alive connections
    server: "_HTTPServer"

    # -- plumbing -------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the request log (/_admin/requests) replaces stderr noise

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        self.hub: HubServer = self.server.hub
        self.method = method
        self.body_consumed = False
        split = urlsplit(self.path)
        self.raw_path, self.query = split.path, parse_qs(split.query)
        self.segments = split_raw_path(self.raw_path)
        self.kind, self.logged = "unknown", False
        try:
            route, self.kind = self._route()
            self._check_auth(self.kind)
            self.hub._take_fault(self.kind)
            route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-response
        except Exception as error:  # a HubError, or a server bug: answer, never hang the client
            if not isinstance(error, HubError):
                error = HubError(500, f"internal error: {type(error).__name__}: {error}")
            if self.logged:  # the answer has started: the only honest signal left is a cut connection
                self.close_connection = True
            else:
                self._drain_body()
                self._send_error(error)
        finally:
            if not self.logged:  # no answer went out (the client vanished first)
                self.hub._log_request(method, self.raw_path, 0, self.kind)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Log before any byte of the answer leaves: a client that saw the answer finds it in the log.
        if not getattr(self, "logged", True):  # errors raised by http.server before _handle are not logged
            self.hub._log_request(self.method, self.raw_path, code, self.kind)
            self.logged = True
        super().send_response(code, message)

    def _base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.hub.host_port}"

    def _body_chunks(self) -> Iterator[bytes]:
        """The request body, streamed; handles Content-Length and chunked transfer encoding."""
        self.body_consumed = True
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield from self._exactly(size)
                self.rfile.readline()
        else:
            yield from self._exactly(int(self.headers.get("Content-Length") or 0))

    def _exactly(self, size: int) -> Iterator[bytes]:
        """`size` bytes of the request body in pieces of at most 1 MiB; a body that ends early is a 400."""
        remaining = size
        while remaining:
            chunk = self.rfile.read(min(remaining, 1 << 20))
            if not chunk:
                raise HubError(400, "request body ended early")
            remaining -= len(chunk)
            yield chunk

    def _body(self) -> bytes:
        return b"".join(self._body_chunks())

    def _drain_body(self) -> None:
        if not self.body_consumed:
            try:
                for _ in self._body_chunks():
                    pass
            except (HubError, OSError, ValueError):
                self.close_connection = True

    def _json_body(self) -> Any:
        try:
            return json.loads(self._body() or b"{}")
        except ValueError as error:
            raise HubError(400, f"request body is not JSON: {error}") from None

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.method != "HEAD":
            self.wfile.write(body)

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None,
                   content_type: str = "application/json") -> None:
        self._send(status, json.dumps(obj).encode(), content_type, headers)

    def _send_error(self, error: HubError) -> None:
        headers = {"X-Error-Message": error.message.replace("\n", " ")[:1000], **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send_json({"error": error.message, **error.extra}, error.status, headers)

    # -- auth -----------------------------------------------------------------------------------
    def _auth_state(self) -> str:
        """'owner' (valid token or no token configured), 'anonymous', or 'invalid'."""
        header = self.headers.get("Authorization")
        if self.hub.token is None:
            return "owner"
        if header is None:
            return "anonymous"
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), self.hub.token):
            return "owner"
        return "invalid"

    def _check_auth(self, kind: str) -> None:
        if kind in {"lfs_put", "lfs_complete"}:
            return  # presigned: the signature in the URL is the credential (checked by the route)
        state = self._auth_state()
        if state == "invalid":
            raise HubError(401, "Invalid credentials in Authorization header")
        if state == "anonymous" and kind not in {"info", "tree", "paths_info", "download", "refs", "commits",
                                                   "validate_yaml", "unknown"}:
            raise HubError(401, "Invalid username or password.")

    def _readable_repo(self, ref: RepoRef) -> dict[str, Any]:
        repo = self.hub.store.load_repo(ref)
        if repo["private"] and self._auth_state() != "owner":
            raise HubError(401, "Repository not found", "RepoNotFound")
        return repo

    # -- routing --------------------------------------------------------------------------------
    def _route(self) -> tuple[Any, str]:
        s, m = self.segments, self.method
        if s[:1] == ["_admin"]:
            return self._admin, "admin"
        if s[:1] == ["_lfs"] and len(s) >= 5:
            ref = self._repo_ref(s[1].removesuffix("s"), s[2], s[3])
            rest = s[4:]
            if m == "PUT" and len(rest) == 1:
                return (lambda: self._lfs_put(ref, rest[0])), "lfs_put"
            if m == "PUT" and len(rest) == 3 and rest[1] == "part":
                return (lambda: self._lfs_put_part(ref, rest[0], rest[2])), "lfs_put"
            if m == "POST" and len(rest) == 2 and rest[1] == "complete":
                return (lambda: self._lfs_complete(ref, rest[0])), "lfs_complete"
            if m == "POST" and len(rest) == 2 and rest[1] == "verify":
                return (lambda: self._lfs_verify(ref, rest[0])), "lfs_verify"
        if s[:1] == ["api"]:
            return self._route_api(s[1:], m)
        return self._route_git(s, m)

    def _repo_ref(self, repo_type: str, namespace: str, name: str) -> RepoRef:
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"invalid repo type {repo_type!r}")
        if not (NAME_RE.fullmatch(namespace) and NAME_RE.fullmatch(name)):
            raise HubError(400, f"invalid repo id {namespace}/{name}")
        return RepoRef(repo_type, f"{namespace}/{name}")

    def _route_api(self, s: list[str], m: str) -> tuple[Any, str]:
        if s == ["whoami-v2"] and m == "GET":
            return self._whoami, "whoami"
        if s == ["repos", "create"] and m == "POST":
            return self._create_repo, "create"
        if s == ["repos", "delete"] and m == "DELETE":
            return self._delete_repo, "delete_repo"
        if s == ["validate-yaml"] and m == "POST":
            return self._validate_yaml, "validate_yaml"
        if len(s) >= 3 and s[0] in {"models", "datasets", "spaces"}:
            ref = self._repo_ref(s[0][:-1], s[1], s[2])
            action, args = (s[3] if len(s) > 3 else None), s[4:]
            rev = args[0] if args else "main"
            table: dict[tuple[str | None, str], tuple[Any, str]] = {
                (None, "GET"): (lambda: self._repo_info(ref, "main"), "info"),
                ("revision", "GET"): (lambda: self._repo_info(ref, rev), "info"),
                ("tree", "GET"): (lambda: self._tree(ref, rev, "/".join(args[1:])), "tree"),
                ("paths-info", "POST"): (lambda: self._paths_info(ref, rev), "paths_info"),
                ("preupload", "POST"): (lambda: self._preupload(ref, rev), "preupload"),
                ("commit", "POST"): (lambda: self._commit(ref, rev), "commit"),
                ("refs", "GET"): (lambda: self._refs(ref), "refs"),
                ("commits", "GET"): (lambda: self._commits(ref, rev), "commits"),
                ("branch", "POST"): (lambda: self._create_branch(ref, rev), "branch"),
                ("xet-write-token", "GET"): (self._no_xet, "xet"),
                ("xet-read-token", "GET"): (self._no_xet, "xet"),
            }
            if (action, m) in table:
                return table[(action, m)]
        raise HubError(404, f"no such endpoint: {m} {self.raw_path}")

    def _route_git(self, s: list[str], m: str) -> tuple[Any, str]:
        repo_type = "model"
        if s and s[0] in {"datasets", "spaces"}:
            repo_type, s = s[0][:-1], s[1:]
        if len(s) == 6 and s[1].endswith(".git") and s[2:] == ["info", "lfs", "objects", "batch"] and m == "POST":
            ref = self._repo_ref(repo_type, s[0], s[1].removesuffix(".git"))
            return (lambda: self._lfs_batch(ref)), "lfs_batch"
        if len(s) >= 5 and s[2] == "resolve" and m in {"GET", "HEAD"}:
            ref = self._repo_ref(repo_type, s[0], s[1])
            return (lambda: self._resolve(ref, s[3], "/".join(s[4:]))), "download"
        raise HubError(404, f"no such endpoint: {m} {self.raw_path}")

    # -- endpoints ------------------------------------------------------------------------------
    def _whoami(self) -> None:
        if self._auth_state() != "owner":
            raise HubError(401, "Invalid username or password.")
        self._send_json({"type": "user", "name": self.hub.user, "fullname": self.hub.user, "orgs": [],
                         "auth": {"type": "access_token",
                                  "accessToken": {"displayName": "rlkeep-dev", "role": "write"}}})

    def _create_repo(self) -> None:
        body = self._json_body()
        repo_type = body.get("type") or "model"
        name = body.get("name") or ""
        namespace = body.get("organization") or self.hub.user
        ref = self._repo_ref(repo_type, namespace, name)
        private = bool(body.get("private")) or body.get("visibility") in {"private", "protected"}
        url = f"{self._base_url()}/{ref.url_prefix}{ref.repo_id}"
        if not self.hub.store.create_repo(ref, private, self.hub.user):
            raise HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
        self._send_json({"url": url, "name": ref.repo_id, "id": ref.repo_id})

    def _delete_repo(self) -> None:
        body = self._json_body()
        ref = self._repo_ref(body.get("type") or "model", body.get("organization") or self.hub.user,
                             body.get("name") or "")
        self.hub.store.delete_repo(ref)
        self._send(200, b"")

    def _validate_yaml(self) -> None:
        body = self._json_body()
        content = body.get("content") or ""
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        if match:
            try:
                metadata = yaml.safe_load(match.group(1))
            except yaml.YAMLError as error:
                raise HubError(400, f"Invalid YAML in README.md metadata: {error}",
                               extra={"errors": [{"message": str(error)}]}) from None
            if metadata is not None and not isinstance(metadata, dict):
                raise HubError(400, "README.md metadata must be a YAML mapping",
                               extra={"errors": [{"message": "metadata must be a mapping"}]})
        self._send_json({"errors": [], "warnings": []})

    def _no_xet(self) -> None:
        raise HubError(501, XET_MESSAGE)

    def _repo_info(self, ref: RepoRef, revision: str) -> None:
        repo = self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        commit = self.hub.store.commit(ref, sha)
        with_blobs = self.query.get("blobs", ["false"])[0].lower() in {"1", "true"}
        namespace, name = ref.repo_id.split("/")
        self._send_json({
            "_id": hashlib.sha1(ref.display.encode()).hexdigest()[:24], "id": ref.repo_id,
            "author": namespace, "sha": sha, "private": repo["private"], "gated": False, "disabled": False,
            "lastModified": commit["date"], "createdAt": repo["created_at"], "downloads": 0, "likes": 0,
            "tags": [], "cardData": {}, "usedStorage": 0,
            "siblings": [sibling(p, e, with_blobs) for p, e in sorted(commit["files"].items())],
        })

    def _tree(self, ref: RepoRef, revision: str, base: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        recursive = self.query.get("recursive", ["false"])[0].lower() in {"1", "true"}
        entries = tree_entries(self.hub.store.files_at(ref, sha), base.strip("/"), recursive)
        cursor = int(self.query.get("cursor", ["0"])[0])
        limit = int(self.query.get("limit", [str(self.hub.tree_page_size)])[0])
        page = entries[cursor: cursor + limit]
        headers = {}
        if cursor + limit < len(entries):
            api_type = f"{ref.repo_type}s"
            path = "/" + quote(base, safe="") if base else ""
            next_url = (f"{self._base_url()}/api/{api_type}/{ref.repo_id}/tree/{quote(revision, safe='')}{path}"
                        f"?recursive={str(recursive).lower()}&expand=false&limit={limit}&cursor={cursor + limit}")
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._send_json(page, headers=headers)

    def _paths_info(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        body = self._body().decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(body or "{}").get("paths", [])
        else:
            paths = parse_qs(body, keep_blank_values=True).get("paths", [])
        files = self.hub.store.files_at(ref, sha)
        entries = [entry for entry in (path_entry(files, p) for p in paths) if entry is not None]
        self._send_json(entries)

    def _preupload(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        if "create_pr" in self.query:
            raise HubError(501, "pull requests are not supported by this test server")
        files = self.hub.store.files_at(ref, self.hub.store.resolve(ref, revision))
        body = self._json_body()
        patterns = self._lfs_patterns(ref, files)
        answers = []
        for item in body.get("files", []):
            path = item.get("path", "")
            try:
                sample = base64.b64decode(item.get("sample") or "", validate=True)
            except binascii.Error:
                raise HubError(400, f"preupload: sample of {path!r} is not base64") from None
            answer = {"path": path, "uploadMode": upload_mode(path, int(item.get("size", 0)), sample, patterns),
                      "shouldIgnore": False}
            remote = files.get(path)
            if remote is not None:
                answer["oid"] = remote["lfs"]["sha256"] if "lfs" in remote else remote["oid"]
            answers.append(answer)
        self._send_json({"files": answers, "commitOid": self.hub.store.resolve(ref, revision)})

    def _lfs_patterns(self, ref: RepoRef, files: dict[str, dict[str, Any]]) -> list[str]:
        entry = files.get(".gitattributes")
        if entry is None:
            return []
        return lfs_patterns(self.hub.store.content_path(ref, entry).read_bytes().decode("utf-8", "replace"))

    def _commit(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        if "create_pr" in self.query:
            raise HubError(501, "pull requests are not supported by this test server")
        header: dict[str, Any] | None = None
        operations: list[dict[str, Any]] = []
        for number, line in enumerate(self._body().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError):
                raise HubError(400, f"commit payload line {number} is not a {{key, value}} JSON object") from None
            if key == "header":
                header = value
            else:
                operations.append(self._commit_operation(key, value, number))
        if header is None:
            raise HubError(400, "commit payload has no header line")
        sha = self.hub.store.apply_commit(ref, revision, header.get("summary") or "", header.get("description") or "",
                                          header.get("parentCommit"), operations, self.hub.user)
        self._send_json({"commitUrl": f"{self._base_url()}/{ref.url_prefix}{ref.repo_id}/commit/{sha}",
                         "commitOid": sha, "success": True})

    def _commit_operation(self, key: str, value: dict[str, Any], number: int) -> dict[str, Any]:
        path = value.get("path", "")
        if key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"commit line {number}: only base64 encoding is supported")
            try:
                return {"op": "file", "path": path, "content": base64.b64decode(value.get("content", ""), validate=True)}
            except binascii.Error:
                raise HubError(400, f"commit line {number}: content of {path!r} is not base64") from None
        if key == "lfsFile":
            if value.get("algo", "sha256") != "sha256":
                raise HubError(400, f"commit line {number}: only sha256 LFS objects are supported")
            return {"op": "lfs", "path": path, "sha256": value.get("oid", ""), "size": value.get("size")}
        if key == "deletedFile":
            return {"op": "delete_file", "path": path}
        if key == "deletedFolder":
            return {"op": "delete_folder", "path": path}
        raise HubError(400, f"commit line {number}: unknown key {key!r}")

    def _refs(self, ref: RepoRef) -> None:
        repo = self._readable_repo(ref)
        result: dict[str, Any] = {
            "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": s} for n, s in repo["branches"].items()],
            "converts": [],
            "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": s} for n, s in repo["tags"].items()],
        }
        if "include_prs" in self.query:
            result["pullRequests"] = []
        self._send_json(result)

    def _commits(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        self._send_json([
            {"id": c["id"], "authors": [{"user": c["author"]}], "date": c["date"], "title": c["title"],
             "message": c["message"]}
            for c in self.hub.store.history(ref, sha)
        ])

    def _create_branch(self, ref: RepoRef, branch: str) -> None:
        body = self._json_body()
        self.hub.store.create_branch(ref, branch, body.get("startingPoint"))
        self._send_json({})

    # -- LFS --------------------------------------------------------------------------------------
    def _lfs_batch(self, ref: RepoRef) -> None:
        self._readable_repo(ref)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise HubError(400, "only the LFS upload operation is supported")
        base = f"{self._base_url()}/_lfs/{ref.repo_type}s/{ref.repo_id}"
        objects = []
        for item in body.get("objects", []):
            oid, size = item.get("oid"), item.get("size")
            if not (isinstance(oid, str) and SHA256_RE.fullmatch(oid) and isinstance(size, int) and size >= 0):
                objects.append({"oid": str(oid), "size": int(size or 0),
                                "error": {"code": 422, "message": "oid must be a sha256 and size an integer"}})
                continue
            answer: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if not self.hub.store.has_lfs_object(ref, oid, size):
                signature = self.hub.sign(ref, oid, size)
                query = f"?size={size}&sig={signature}"
                verify = {"href": f"{base}/{oid}/verify{query}", "header": {}}
                if size > self.hub.multipart_threshold and "multipart" in body.get("transfers", ["basic"]):
                    chunk = self.hub.chunk_size
                    parts = max(1, -(-size // chunk))
                    header = {"chunk_size": str(chunk)}
                    header.update({str(n): f"{base}/{oid}/part/{n}{query}" for n in range(1, parts + 1)})
                    upload = {"href": f"{base}/{oid}/complete{query}", "header": header}
                else:
                    upload = {"href": f"{base}/{oid}{query}"}
                answer["actions"] = {"upload": upload, "verify": verify}
            objects.append(answer)
        self._send_json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                        content_type="application/vnd.git-lfs+json")

    def _check_signature(self, ref: RepoRef, oid: str) -> int:
        size_text = self.query.get("size", [""])[0]
        signature = self.query.get("sig", [""])[0]
        if not size_text.isdigit() or not hmac.compare_digest(signature, self.hub.sign(ref, oid, int(size_text))):
            raise HubError(403, "invalid or missing upload signature")
        return int(size_text)

    def _lfs_put(self, ref: RepoRef, oid: str) -> None:
        size = self._check_signature(ref, oid)
        self.hub.store.store_lfs_object(ref, oid, size, self._body_chunks())
        self._send(200, b"", headers={"ETag": f'"{oid}"'})

    def _parts_dir(self, ref: RepoRef, oid: str) -> Path:
        digest = hashlib.sha1(f"{ref.display}/{oid}".encode()).hexdigest()
        return self.hub.store.root / "incoming" / f"parts-{digest}"

    def _lfs_put_part(self, ref: RepoRef, oid: str, number: str) -> None:
        self._check_signature(ref, oid)
        if not number.isdigit():
            raise HubError(400, f"invalid part number {number!r}")
        directory = self._parts_dir(ref, oid)
        directory.mkdir(parents=True, exist_ok=True)
        data = self._body()
        atomic_write_bytes(directory / f"{int(number):06d}", data)
        self._send(200, b"", headers={"ETag": f'"{hashlib.md5(data).hexdigest()}"'})

    def _lfs_complete(self, ref: RepoRef, oid: str) -> None:
        size = self._check_signature(ref, oid)
        body = self._json_body()
        directory = self._parts_dir(ref, oid)
        numbers = [part.get("partNumber") for part in body.get("parts", [])]
        if numbers != list(range(1, len(numbers) + 1)):
            raise HubError(400, "parts must be numbered 1..N in order")

        def chunks() -> Iterator[bytes]:
            for number in numbers:
                path = directory / f"{number:06d}"
                if not path.is_file():
                    raise HubError(400, f"part {number} of {oid} was never uploaded")
                yield path.read_bytes()

        self.hub.store.store_lfs_object(ref, oid, size, chunks())
        shutil.rmtree(directory, ignore_errors=True)
        self._send_json({})

    def _lfs_verify(self, ref: RepoRef, oid: str) -> None:
        body = self._json_body()
        if not self.hub.store.has_lfs_object(ref, oid, body.get("size")):
            raise HubError(404, f"LFS object {oid} is not stored")
        self._send_json({})

    # -- download ---------------------------------------------------------------------------------
    def _resolve(self, ref: RepoRef, revision: str, path: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        files = self.hub.store.files_at(ref, sha)
        if path not in files:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", headers={"X-Repo-Commit": sha})
        entry = files[path]
        size = entry["size"]
        etag = entry["lfs"]["sha256"] if "lfs" in entry else entry["oid"]
        headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if "lfs" in entry:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(size)})
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
            if not match or (match.group(1) == "" and match.group(2) == ""):
                raise HubError(416, f"unsupported Range {range_header!r}", headers={"Content-Range": f"bytes */{size}"})
            if match.group(1) == "":
                start, end = max(0, size - int(match.group(2))), size - 1
            else:
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size and size > 0 or start > end + 1:
                raise HubError(416, f"Range {range_header!r} is outside a file of {size} bytes",
                               headers={"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.method == "HEAD":
            return
        with open(self.hub.store.content_path(ref, entry), "rb") as handle:
            handle.seek(start)
            remaining = length
            while remaining:
                chunk = handle.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)

    # -- admin ------------------------------------------------------------------------------------
    def _admin(self) -> None:
        if self._auth_state() != "owner":
            raise HubError(401, "Invalid credentials in Authorization header")
        s, m = self.segments[1:], self.method
        if s == ["faults"] and m == "POST":
            body = self._json_body()
            self.hub.fail_next(str(body.get("kind")), int(body.get("count", 1)), int(body.get("status", 500)))
            self._send_json({"faults": self.hub.faults()})
        elif s == ["faults"] and m == "DELETE":
            self.hub.clear_faults()
            self._send_json({"faults": {}})
        elif s == ["faults"] and m == "GET":
            self._send_json({"faults": self.hub.faults()})
        elif s == ["requests"] and m == "GET":
            self._send_json(self.hub.requests())
        elif s == ["requests"] and m == "DELETE":
            self.hub.clear_requests()
            self._send_json([])
        elif s == ["edit"] and m == "POST":
            body = self._json_body()
            sha = self.hub.edit_file(body["repo_id"], body["path"], base64.b64decode(body["content_b64"]),
                                     repo_type=body.get("repo_type", "model"))
            self._send_json({"commitOid": sha})
        else:
            raise HubError(404, f"no such admin endpoint: {m} {self.raw_path}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    hub: "HubServer"


# ---------------------------------------------------------------------------------------------
# Server object


class HubServer:
    """In-process Hub-compatible server: `with HubServer(root, token=...) as hub: hub.url`."""

    def __init__(self, root: str | os.PathLike[str], token: str | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, user: str = DEFAULT_USER, multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, tree_page_size: int = DEFAULT_TREE_PAGE_SIZE):
        self.store = HubStore(Path(root))
        self.token = token
        self.user = user
        self.multipart_threshold = multipart_threshold
        self.chunk_size = chunk_size
        self.tree_page_size = tree_page_size
        self._host, self._port = host, port
        self._signing_key = secrets.token_bytes(32)
        self._faults: dict[str, list[int]] = {}
        self._requests: list[dict[str, Any]] = []
        self._state_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "HubServer":
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self._host, self._port), HubHandler)
        httpd.hub = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="rlkeep-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd, self._thread = None, None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host_port(self) -> str:
        if self._httpd is None:
            raise RuntimeError("HubServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.host_port}"

    @property
    def root(self) -> Path:
        return self.store.root

    def sign(self, ref: RepoRef, oid: str, size: int) -> str:
        return hmac.new(self._signing_key, f"{ref.display}/{oid}/{size}".encode(), hashlib.sha256).hexdigest()

    # -- fault injection and request log -------------------------------------------------------
    def fail_next(self, kind: str, count: int = 1, status: int = 500) -> None:
        """Make the next `count` requests of `kind` (see FAULT_KINDS) answer `status`."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if count < 0 or not 400 <= status <= 599:
            raise ValueError("count must be >= 0 and status a 4xx/5xx code")
        with self._state_lock:
            self._faults[kind] = [count, status]

    def clear_faults(self) -> None:
        with self._state_lock:
            self._faults.clear()

    def faults(self) -> dict[str, dict[str, int]]:
        with self._state_lock:
            return {k: {"count": c, "status": s} for k, (c, s) in self._faults.items() if c > 0}

    def _take_fault(self, kind: str) -> None:
        with self._state_lock:
            fault = self._faults.get(kind)
            if not fault or fault[0] <= 0:
                return
            fault[0] -= 1
            status = fault[1]
        raise HubError(status, f"injected fault: {kind} request failed with HTTP {status}")

    def _log_request(self, method: str, path: str, status: int, kind: str) -> None:
        with self._state_lock:
            self._requests.append({"method": method, "path": path, "status": status, "kind": kind})
            del self._requests[:-10000]

    def requests(self) -> list[dict[str, Any]]:
        with self._state_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._state_lock:
            self._requests.clear()

    # -- admin helpers ------------------------------------------------------------------------------
    def edit_file(self, repo_id: str, path: str, new_bytes: bytes, *, repo_type: str = "model",
                  author: str = "someone-else", message: str | None = None) -> str:
        """Commit `new_bytes` at `path` on main as another user (a remote edit); returns the commit sha."""
        ref = RepoRef(repo_type, repo_id)
        store = self.store
        with store.lock:
            files = store.files_at(ref, store.resolve(ref, "main"))
            patterns = lfs_patterns(store.content_path(ref, files[".gitattributes"]).read_text()) \
                if ".gitattributes" in files else []
            if upload_mode(path, len(new_bytes), new_bytes[:512], patterns) == "lfs":
                sha256 = hashlib.sha256(new_bytes).hexdigest()
                store.store_lfs_object(ref, sha256, len(new_bytes), [new_bytes])
                operation: dict[str, Any] = {"op": "lfs", "path": path, "sha256": sha256, "size": len(new_bytes)}
            else:
                operation = {"op": "file", "path": path, "content": new_bytes}
            return store.apply_commit(ref, "main", message or f"Update {path}", "", None, [operation], author)


# ---------------------------------------------------------------------------------------------
# Every stored byte


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


# ---------------------------------------------------------------------------------------------
# Process entry point


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlkeep_dev.devserver.hub", description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True, type=Path, help="directory holding the server state")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default=os.environ.get("RLKEEP_HUB_TOKEN"),
                        help="accepted bearer token (default $RLKEEP_HUB_TOKEN; none: no auth)")
    parser.add_argument("--ready-file", type=Path, help="written with {url, pid} once listening")
    args = parser.parse_args(argv)

    server = HubServer(args.root, token=args.token, host=args.host, port=args.port).start()
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if args.ready_file is not None:
        write_json(args.ready_file, {"url": server.url, "pid": os.getpid()})
    print(f"rlkeep hub server listening on {server.url} (root {args.root})", flush=True)
    while not stopping.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
