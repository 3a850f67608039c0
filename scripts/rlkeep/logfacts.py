"""Facts read out of a job's synced logs tarball, remembered on disk per version of the tarball.

Every invocation ends by writing STATUS.json and the campaign pages for every job with a record,
and both state the run's source revision and tracker URL, which come from `sync/logs.tar` (its
member headers; every attempt's whole trainer log). Over a campaign of hundreds of runs that is
gigabytes read after every invocation, for tarballs that stopped changing when they were synced.
So each fact is kept in `<job>/.work/logs_facts/<name>.json` beside the tarball's identity (inode,
size, mtime: a sync replaces the tarball, which gives it a new inode) and what else it was asked
for, and is read out of the tarball again only when one of them changes.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlkeep.jsonio import write_json


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
