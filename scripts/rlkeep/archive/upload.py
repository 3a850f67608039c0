"""Copy the archive to its destination (archive.dest: s3://, file:// or a Hub dataset) and hold the
remote copy to the local files: listing, HEAD and a fresh full read, with a bounded wait for a
store that shows a fresh upload late.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.storage import ObjectMissing, S3Store, Store, open_store
from rlkeep.waits import seconds_from_env
from rlkeep.urls import join_url

log = logging.getLogger("rlkeep.archive")

CONSISTENCY_WAIT_ENV = "RLKEEP_STORE_CONSISTENCY_WAIT"
DEFAULT_CONSISTENCY_WAIT = 30.0  # seconds a fresh upload may take to show in listings and reads
HF_DATASET_PREFIX = "hf://datasets/"


# --------------------------------------------------------------------------- upload


class DiscardSink:
    """A rewindable sink that keeps nothing (read_into hashes; a retry seeks back and truncates)."""

    def __init__(self) -> None:
        self.position = 0

    def write(self, data: bytes) -> int:
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = 0) -> int:
        self.position = position
        return position

    def truncate(self, size: int | None = None) -> int:
        return self.position


def _remote_problem(store: Store, key: str, local_size: int, local_sha: str) -> tuple[str | None, int, str]:
    """(what is wrong with the remote copy of `key`, or None; its size; its sha256).

    The object must be in a listing of its folder with the local size (what anyone browsing the
    destination sees), answer a HEAD with that size (S3), and a fresh full read must give the
    local sha256: three views a store with list-after-write lag may not agree on yet.
    """
    parent = key.rsplit("/", 1)[0] if "/" in key else ""
    listed = next((info.size for info in store.list(parent) if info.key == key), None)
    if listed is None:
        return "not in the listing of its folder", -1, ""
    if listed != local_size:
        return f"listed with {listed} bytes, the local file has {local_size}", listed, ""
    if isinstance(store, S3Store):
        try:
            headed = store.head(key).size
        except ObjectMissing:
            return "listed, but a HEAD answers no such object", listed, ""
        if headed != local_size:
            return f"a HEAD gives {headed} bytes, the local file has {local_size}", headed, ""
    try:
        read_size, remote_sha = store.read_into(key, DiscardSink())  # type: ignore[arg-type]
    except ObjectMissing:
        return "listed, but a read answers no such object", listed, ""
    if read_size != local_size or remote_sha != local_sha:
        return (f"a fresh read gave {read_size} bytes with sha256 {remote_sha}, the local file has {local_size} bytes "
                f"with sha256 {local_sha}"), read_size, remote_sha
    return None, read_size, remote_sha


def consistency_bound() -> float:
    """Seconds verification waits for a store to show an upload it just took (RLKEEP_STORE_CONSISTENCY_WAIT)."""
    return seconds_from_env(CONSISTENCY_WAIT_ENV, DEFAULT_CONSISTENCY_WAIT)

def verified_remote_copy(store: Store, url: str, path: Path) -> dict[str, Any]:
    """Hold the remote `url` (key path.name of store) to the local file, re-checking while a store
    with list-after-write lag catches up (bounded); raise RlkeepError naming what still differs."""
    local_size, local_sha = path.stat().st_size, sha256_file(path)
    bound = consistency_bound()
    started = time.monotonic()
    pause, checks = 0.25, 0
    while True:
        checks += 1
        problem, size, sha = _remote_problem(store, path.name, local_size, local_sha)
        if problem is None:
            if checks > 1:
                log.info("%s: the store showed the upload after %d checks (%.1f s)", url, checks,
                         time.monotonic() - started)
            return {"url": url, "key": path.name, "size": size, "sha256": sha}
        waited = time.monotonic() - started
        if waited + pause > bound:
            raise RlkeepError(f"{url}: {problem} (local {path}); still so after {checks} checks over {waited:.1f} s, "
                              f"the {bound:g} s allowed for the store to show an upload ({CONSISTENCY_WAIT_ENV}); "
                              "the archive upload is not verified")
        log.info("%s: %s; checking again in %.2f s (the store may not show a fresh upload everywhere yet)",
                 url, problem, pause)
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def _archive_base(dest_url: str, job: str, paths: tuple[Path, ...]) -> str:
    if not job or "/" in job or job in {".", ".."}:
        raise RlkeepError(f"archive upload: job {job!r} is not a valid folder name")
    for path in paths:
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; build and verify the archive before uploading it")
    return f"{dest_url.rstrip('/')}/{job}"


def upload_archive(tgz: Path, manifest: Path, dest_url: str, job: str) -> dict[str, Any]:
    """Upload the tgz and MANIFEST under `<dest>/<job>/`, then verify both remotely (see below)."""
    tgz, manifest = Path(tgz), Path(manifest)
    base = _archive_base(dest_url, job, (tgz, manifest))
    store = open_store(base)
    for path in (tgz, manifest):
        store.put_file(path.name, path)
    return verify_uploaded_archive(tgz, manifest, dest_url, job)


def verify_uploaded_archive(tgz: Path, manifest: Path, dest_url: str, job: str) -> dict[str, Any]:
    """Hold `<dest>/<job>/<tgz name>` and `<dest>/<job>/<manifest name>` to the local files.

    Size from the listing and a HEAD, sha256 from a fresh full read of the remote object; an
    ETag is never taken as a content hash. A store with list-after-write lag is given up to
    RLKEEP_STORE_CONSISTENCY_WAIT seconds to agree; any difference left raises RlkeepError.
    """
    tgz, manifest = Path(tgz), Path(manifest)
    base = _archive_base(dest_url, job, (tgz, manifest))
    store = open_store(base)
    objects = [verified_remote_copy(store, join_url(base, path.name), path) for path in (tgz, manifest)]
    return {"status": "completed", "dest": base, "objects": objects,
            "verified": "listing and (S3) HEAD size, and sha256 of a fresh full read, against the local files"}


def upload_and_verify(tgz: Path, manifest: Path, dest: str, job: str) -> dict[str, Any]:
    """Copy the archive to `dest` (s3://, file:// or hf://datasets/<org>/<name>) and verify the copy."""
    if dest.startswith(HF_DATASET_PREFIX):
        repo_id = dest[len(HF_DATASET_PREFIX):].strip("/")
        # huggingface_hub costs about half a second to import: only a Hub destination pays for it
        from rlkeep.hub import upload_archive_to_hub

        return upload_archive_to_hub(tgz, manifest, repo_id, job, private=True)
    return upload_archive(tgz, manifest, dest, job)
