"""Atomic writes of JSON sentinels and small files: a reader never sees half a file."""
from __future__ import annotations

import glob
import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


def partial_files(path: str | os.PathLike[str]) -> list[Path]:
    """The temporary files atomic_write_bytes makes beside `path`: one is left when a writer is
    killed or stopped before it could remove it (e.g. by a signal inside mkstemp)."""
    target = Path(path)
    return list(target.parent.glob(f".{glob.escape(target.name)}.*.part"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_writer(path) as handle:
        handle.write(data)


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary handle on a temporary file beside `path`, renamed onto it (synced) when the `with`
    ends without an error, and removed when it does not."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in partial_files(target):
        stale.unlink(missing_ok=True)  # left by a writer that was killed mid-way
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle
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


STYLE: dict[str, Any] = {"indent": 2, "sort_keys": True, "ensure_ascii": False}


def dumps(obj: Any) -> str:
    """The one JSON style of every sentinel: sorted keys, indent 2, trailing newline."""
    return json.dumps(obj, **STYLE) + "\n"


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """dumps(obj), atomically, encoded as it is written: a manifest of many records never exists
    whole in memory as text (nor as the encoder's pieces of it) beside the records."""
    with atomic_writer(path) as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", newline="\n", write_through=False)
        json.dump(obj, text, **STYLE)
        text.write("\n")
        text.flush()
        text.detach()


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
