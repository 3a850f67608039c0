"""Local trees: which files of a staging folder a publication uploads (hidden paths stay
local), which files of a fresh download count, their digests, and the differences between two.

Staging trees are published as they are except hidden paths (any component starting with '.'):
Snakemake's `.snakemake_timestamp`, `.cache/` folders and half-written temp files stay local.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rlkeep.hashing import sha256_file

ALLOWED_REMOTE_EXTRAS = frozenset({".gitattributes"})  # the Hub creates it with every repo
UPLOAD_IGNORE_PATTERNS = [".*", "*/.*"]  # fnmatch '*' spans '/': any hidden path component
CLIENT_BOOKKEEPING = ".cache/huggingface"  # written by snapshot_download(local_dir=...)
CARD_NAME = "README.md"  # a repo's card, model or dataset


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str


def is_published_path(relpath: str) -> bool:
    """False for hidden paths (a component starting with '.'): never uploaded from staging."""
    return not any(part.startswith(".") for part in relpath.split("/"))


def git_blob_sha1_file(path: Path) -> str:
    digest = hashlib.sha1(b"blob " + str(path.stat().st_size).encode() + b"\0")
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def staged_files(stage_dir: Path) -> dict[str, Path]:
    """The files a publication of `stage_dir` uploads: relative posix path -> local path."""
    return {
        path.relative_to(stage_dir).as_posix(): path
        for path in sorted(stage_dir.rglob("*"))
        if path.is_file() and is_published_path(path.relative_to(stage_dir).as_posix())
    }


def downloaded_files(download_dir: Path) -> dict[str, Path]:
    """Every file of a downloaded repo, hidden ones included, minus the client's bookkeeping."""
    return {
        rel: path
        for path in sorted(download_dir.rglob("*"))
        if path.is_file()
        and not (rel := path.relative_to(download_dir).as_posix()).startswith(CLIENT_BOOKKEEPING + "/")
    }


def digest_files(files: dict[str, Path]) -> dict[str, FileDigest]:
    return {rel: FileDigest(path.stat().st_size, sha256_file(path)) for rel, path in files.items()}


def tree_differences(stage: dict[str, FileDigest], remote: dict[str, FileDigest],
                     allowed_extras: frozenset[str] = ALLOWED_REMOTE_EXTRAS) -> list[str]:
    """Problems between a staged tree and a downloaded one, one line per file."""
    problems = [f"{rel}: in staging but missing from the Hub" for rel in sorted(stage.keys() - remote.keys())]
    problems += [f"{rel}: on the Hub but not in staging"
                 for rel in sorted(remote.keys() - stage.keys() - allowed_extras)]
    for rel in sorted(stage.keys() & remote.keys()):
        local, hub = stage[rel], remote[rel]
        if local.size != hub.size:
            problems.append(f"{rel}: size differs (staging {local.size} bytes, Hub {hub.size} bytes)")
        elif local.sha256 != hub.sha256:
            problems.append(f"{rel}: content differs (sha256 staging {local.sha256}, Hub {hub.sha256})")
    return problems


def compare_trees(stage_dir: Path, download_dir: Path) -> list[str]:
    """Missing, extra (beyond ALLOWED_REMOTE_EXTRAS), size- or sha256-mismatched files."""
    return tree_differences(digest_files(staged_files(Path(stage_dir))),
                            digest_files(downloaded_files(Path(download_dir))))


def remote_extras(stage_dir: Path, download_dir: Path) -> list[str]:
    """Allowed files the Hub holds beyond staging (e.g. `.gitattributes`)."""
    extra = downloaded_files(Path(download_dir)).keys() - staged_files(Path(stage_dir)).keys()
    return sorted(extra & ALLOWED_REMOTE_EXTRAS)


def tree_bytes(root: Path) -> int:
    """Bytes of every file below `root`."""
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
