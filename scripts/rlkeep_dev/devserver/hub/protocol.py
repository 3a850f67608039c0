"""Hub protocol facts the server answers with: limits and defaults, which uploads are LFS (size,
binary sample, `.gitattributes` patterns), what a repo path may be, repo references, the error a
refused request carries, and file, folder and sibling entries in the shapes the Hub lists them.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

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
    "lfs_verify", "commit", "download", "validate_yaml", "xet_token", "xet_read",
)
XET_MESSAGE = (
    "This Hub-compatible test server runs in LFS mode: it has no Xet storage. Upload by the LFS protocol "
    "(preupload, LFS batch, commit); start the server with xet=True (--xet) for Xet."
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
# Listing entries in Hub shapes


def file_entry(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": path}
    if "lfs" in entry:
        lfs = entry["lfs"]
        result["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
    if "xetHash" in entry:
        result["xetHash"] = entry["xetHash"]
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
