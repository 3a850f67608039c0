"""Free space on the data root's filesystem: refuse early when the need is known, and say it
plainly when a write runs out of space anyway (ENOSPC/EDQUOT)."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from rlkeep.errors import RlkeepError

# A tar of n members is their bytes plus a 512-byte header (and a PAX header) and padding each.
TAR_OVERHEAD_PER_MEMBER = 2048
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(RlkeepError):
    """The filesystem that would hold a step's output has less free space than the step needs."""


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Free bytes (for this user) on the filesystem that holds `path` or its nearest existing parent."""
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
