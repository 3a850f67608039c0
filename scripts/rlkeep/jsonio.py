"""Atomic writes of JSON sentinels and small files: a reader never sees half a file."""
from __future__ import annotations

import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def partial_files(path: str | os.PathLike[str]) -> list[Path]:
    """The temporary files atomic_write_bytes makes beside `path`: one is left when a writer is
    killed or stopped before it could remove it (e.g. by a signal inside mkstemp)."""
    target = Path(path)
    return list(target.parent.glob(f".{glob.escape(target.name)}.*.part"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in partial_files(target):
        stale.unlink(missing_ok=True)  # left by a writer that was killed mid-way
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def dumps(obj: Any) -> str:
    """The one JSON style of every sentinel: sorted keys, indent 2, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, dumps(obj).encode("utf-8"))


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def key_sorted(value: Any) -> Any:
    """`value` with the keys of every mapping in sorted order (lists keep theirs).

    Snakemake compares a rule's params by their printed form, so a mapping taken from a record
    would rerun the rule when only the order of the record's fields changed (a YAML tool that sorts,
    a hand edit): params built from records and config go through this.
    """
    if isinstance(value, dict):
        return {key: key_sorted(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list):
        return [key_sorted(item) for item in value]
    return value
