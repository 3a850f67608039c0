"""Free space on the data root's filesystem: what a whole run needs, computed from the store listing
before the first byte moves; refuse early when the need is known, and say it plainly when a write
runs out of space anyway (ENOSPC/EDQUOT).

`RLKEEP_FREE_BYTES`, when set, stands in for the filesystem's free bytes (the tests make a data
root small with it; no loop device or quota needed)."""
from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError

# A tar of n members is their bytes plus a 512-byte header (and a PAX header) and padding each.
TAR_OVERHEAD_PER_MEMBER = 2048
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
FREE_BYTES_ENV = "RLKEEP_FREE_BYTES"
# What a run holds at its peak, per byte it copies: the sync tars stay; the archive beside them is
# counted at their size (gzip's ratio is not known before it runs), members are redacted as they
# stream, so no second uncompressed copy; the restore rehearsal compares digests as it streams.
ARCHIVE_PER_TAR_BYTE = 1


class DiskFullError(RlkeepError):
    """The filesystem that would hold a step's output has less free space than the step needs."""


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Free bytes (for this user) on the filesystem that holds `path` or its nearest existing parent."""
    injected = os.environ.get(FREE_BYTES_ENV)
    if injected is not None:
        try:
            return int(injected)
        except ValueError:
            raise RlkeepError(f"environment variable {FREE_BYTES_ENV}={injected!r}: expected a byte count") from None
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def require_free(path: str | os.PathLike[str], needed: int, what: str) -> None:
    """Refuse before writing anything when `needed` bytes will not fit beside `path`."""
    free = free_bytes(path)
    if needed > free:
        raise DiskFullError(
            f"{what}: not enough space for {Path(path).absolute()}: needs {needed:,} bytes, its filesystem has "
            f"{free:,} free; nothing was written. Free at least {needed - free:,} bytes there (or move the data "
            "root), then rerun the same command")


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE


def no_space_message(error: OSError, fallback: str | os.PathLike[str], needed: int | None = None) -> str:
    """What a write that hit ENOSPC says: the full path, the free space left, the need when known."""
    path = Path(error.filename or fallback).absolute()
    need = f" needed {needed:,} bytes;" if needed is not None else ""
    return (f"no space left on the filesystem of {path} ({error.strerror}):{need} {free_bytes(path):,} bytes free now; "
            "what was being written has been removed. Free space there, then rerun the same command")


def _model_need(objects: list[tuple[str, int]], ckpts_prefix: str | None, exports_prefix: str | None,
                max_shard_bytes: int) -> tuple[int, int]:
    """(bytes, copies) of the saved step whose export holds the most on disk at its peak (the selected
    step is chosen later, from the metrics). An FSDP step's model rank files are read in place from
    the store into the model's shards: its model is on disk once. An HF export is downloaded and its
    shards linked into the model, once, unless a shard exceeds max_shard_bytes: then the model is
    repacked from the download, twice until the download is removed."""
    per_step: dict[tuple[str, str], list[int]] = {}
    for key, size in objects:
        name = key.rsplit("/", 1)[-1]
        for prefix, wanted in ((ckpts_prefix, r"model_world_size_\d+_rank_\d+\.pt"),
                               (exports_prefix, r".+\.safetensors")):
            if prefix and key.startswith(prefix) and re.fullmatch(wanted, name):
                step = key[len(prefix):].split("/", 1)[0]
                found = per_step.setdefault((prefix, step), [0, 1])
                found[0] += size
                if prefix == exports_prefix and size > max_shard_bytes:
                    found[1] = 2
    return max(((nbytes, copies) for nbytes, copies in per_step.values()), key=lambda need: need[0] * need[1],
               default=(0, 1))


def run_space_need(objects: Iterable[tuple[str, int]], *, traces_prefix: str | None, ckpts_prefix: str | None,
                   exports_prefix: str | None, left_out: Callable[[str], Any],
                   max_shard_bytes: int | None = None) -> dict[str, int]:
    """What a run's data root holds at its peak, from the store listing (key, size) under the
    record's store: the sync tars (the trace tree, and the logs and artifacts `left_out` does not
    name as weights or dumps), the archive beside them, and the model its export holds at its peak
    (model_bytes, model_copies times)."""
    objects = list(objects)
    prefixes = [p.strip("/") + "/" if p else None for p in (traces_prefix, ckpts_prefix, exports_prefix)]
    traces, ckpts, exports = prefixes
    trace_bytes = log_bytes = members = 0
    for key, size in objects:
        if traces and key.startswith(traces):
            trace_bytes += size
        elif not left_out(key):
            log_bytes += size
        else:
            continue
        members += 1
    tars = trace_bytes + log_bytes + TAR_OVERHEAD_PER_MEMBER * (members + 4)
    if max_shard_bytes is None:
        from rlkeep.export.layout import DEFAULT_MAX_SHARD_BYTES  # the export's limit (rlkeep.export imports us)
        max_shard_bytes = DEFAULT_MAX_SHARD_BYTES
    model, copies = _model_need(objects, ckpts, exports, max_shard_bytes)
    archive = ARCHIVE_PER_TAR_BYTE * tars
    return {"trace_bytes": trace_bytes, "log_bytes": log_bytes, "sync_tar_bytes": tars, "archive_bytes": archive,
            "model_bytes": model, "model_copies": copies, "needed_bytes": tars + archive + copies * model}


def bytes_under(folder: Path) -> int:
    """The bytes of the files under `folder` (what a resumed run already holds)."""
    total = 0
    for directory, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


def require_run_space(job_dir: Path, need: dict[str, int], what: str) -> tuple[int, int]:
    """Refuse before any transfer when the data root cannot hold the run at its peak (less what the
    job folder already holds, on a resumed run); (bytes still needed, free bytes)."""
    present = bytes_under(job_dir) if job_dir.is_dir() else 0
    still = max(0, need["needed_bytes"] - present)
    free = free_bytes(job_dir)
    parts = (f"the sync tars ({need['sync_tar_bytes']:,} bytes), the archive beside them (up to "
             f"{need['archive_bytes']:,}) and the model ({need['model_bytes']:,} bytes, {need['model_copies']}x "
             f"during export)")
    if still > free:
        raise DiskFullError(
            f"{what}: this run needs {still:,} bytes free on the data root before it starts, its filesystem has "
            f"{free:,} ({Path(job_dir).absolute()}): {parts}"
            + (f", less the {present:,} bytes the job folder holds already" if present else "")
            + f"; nothing was transferred. Free at least {still - free:,} bytes there (or move the data root), "
              "then rerun the same command")
    return still, free
