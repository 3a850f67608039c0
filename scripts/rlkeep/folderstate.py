"""A cheap fingerprint of a job folder and its record, for what is rebuilt after every invocation.

Every invocation ends by writing STATUS.json and the campaign pages for every job with a record
(rlkeep.campaign.writer, from rules/invocation.smk). Over a campaign of hundreds of runs most of them did not
change, and rebuilding them reads every run's sentinels and tables again (campaign pages: tens of
ms and a few hundred KB per run). A job's STATUS.json and its page are made only from the record
and files at most three levels into the job folder (the deepest is whether
stage/model/training_logs/ has entries, and adding one changes that folder's listed mtime), so the
listing of those levels
(name, size, mtime_ns, inode: an atomic rewrite gives a new inode) and the record's stat tell
whether anything they show can have changed. `.work/` is left out: it holds the steps' scratch
state and rlkeep's own memos, which neither STATUS.json nor the pages read (the one they do,
`remembered` below, follows sync/logs.tar).

Facts read out of a job's synced logs tarball (the run's source revision, its tracker URL) are
remembered the same way: both STATUS.json and the pages state them, and they come from
`sync/logs.tar` (its member headers; every attempt's whole trainer log), gigabytes over a campaign
for tarballs that stopped changing when they were synced. `remembered` keeps each fact in
`<job>/.work/logs_facts/<name>.json` beside the tarball's identity (inode, size, mtime: a sync
replaces the tarball, which gives it a new inode) and what else it was asked for, and reads it out
of the tarball again only when one of them changes.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from rlkeep.jsonio import write_json

FINGERPRINT_DEPTH = 3
SKIPPED_AT_TOP = frozenset({".work"})


def folder_entries(job_dir: Path, *, depth: int = FINGERPRINT_DEPTH,
                   skip_at_top: Collection[str] = SKIPPED_AT_TOP) -> list[tuple[str, int, int, int]]:
    """(relative path, size, mtime_ns, inode) of every entry down to `depth` levels, sorted."""
    found: list[tuple[str, int, int, int]] = []

    def walk(directory: str, prefix: str, level: int) -> None:
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if level == 1 and entry.name in skip_at_top:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while listing: the next fingerprint sees the folder as it is then
            found.append((prefix + entry.name, info.st_size, info.st_mtime_ns, info.st_ino))
            if level < depth and entry.is_dir(follow_symlinks=False):
                walk(entry.path, f"{prefix}{entry.name}/", level + 1)

    walk(str(job_dir), "", 1)
    return found


def job_fingerprint(record_file: Path, job_dir: Path, settings: Any = None, *,
                    skip_at_top: Collection[str] = SKIPPED_AT_TOP) -> str:
    """A digest of the record file's stat, the job folder's listing and `settings` (JSON values that
    change what is built from them, e.g. code_digest())."""
    try:
        record = record_file.stat()
        record_stat: list[int] | None = [record.st_size, record.st_mtime_ns, record.st_ino]
    except FileNotFoundError:
        record_stat = None
    payload = json.dumps([record_stat, folder_entries(job_dir, skip_at_top=skip_at_top), settings],
                         separators=(",", ":"), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of rlkeep's own source (every file of the package): what builds STATUS.json and the
    pages. Unlike the git revision it is known in an installed copy too, and a commit that changes
    no code (documentation, tests) rebuilds nothing."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and path.suffix in {".py", ".json", ".yaml"}:
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


REFRESH_LOCK_WAIT_S = 120.0  # a refresh holds the lock for seconds; past this, another is stuck


@contextlib.contextmanager
def refresh_lock(lock_path: Path, wait_s: float = REFRESH_LOCK_WAIT_S) -> Iterator[bool]:
    """Serialize the refreshes that remember fingerprints: two invocations ending together could
    otherwise leave an older page or STATUS.json under the newer fingerprint, kept until the job
    changes again. Yields whether the lock is held. The end of an invocation must never hang on
    it: after `wait_s` (a holder stuck on a dead mount, say) the refresh says so and goes on
    unlocked, as it does without a word where the filesystem has no `flock` (some Lustre mounts)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    print(f"rlkeep: {lock_path} still held after {wait_s:g} s; refreshing without it",
                          file=sys.stderr)
                    yield False
                    return
                time.sleep(0.05)
            except OSError:
                yield False
                return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remembered(job_dir: Path, name: str, logs_tar: Path, key: Any, compute: Callable[[], Any]) -> Any:
    """`compute()` for this version of `logs_tar` and this `key` (JSON values), from disk when known."""
    info = logs_tar.stat()
    identity = {"inode": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns, "key": key}
    cache = Path(job_dir) / ".work" / "logs_facts" / f"{name}.json"
    try:
        saved = json.loads(cache.read_bytes())
        if isinstance(saved, dict) and saved.get("identity") == identity and "value" in saved:
            return saved["value"]
    except (OSError, ValueError):
        pass  # not known yet, or unreadable: read the tarball
    value = compute()
    try:
        write_json(cache, {"identity": identity, "value": value})
    except OSError:
        pass  # a full or read-only data root: the fact is read out of the tarball again next time
    return value
