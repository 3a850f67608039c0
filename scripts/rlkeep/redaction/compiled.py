"""Hyperscan databases kept between processes: compiling the prefilter's patterns costs every
redacting step more CPU than scanning a small run's files, and the patterns change only with
rlkeep's rules. A database is cached under `$XDG_CACHE_HOME/rlkeep` (default `~/.cache/rlkeep`),
named by the digest of what built it (the patterns, their flags, Hyperscan's version, this host's
CPU), and stored with the sha256 of its bytes, checked before it is loaded; an unreadable, corrupt,
foreign or unwritable cache means compiling, as without one. Only patterns that hold no secret are
compiled through here: the environment's credential values are never written to disk.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DIGEST_BYTES = 32


def cache_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlkeep"


def _cpu_flags() -> str:
    """The CPU's feature flags (a database is compiled for the host's instruction set)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def database_key(hyperscan: Any, expressions: Sequence[bytes], flags: Sequence[int]) -> str:
    version = getattr(hyperscan, "__version__", "?")
    built_from = repr((version, platform.machine(), _cpu_flags(), list(expressions), list(flags)))
    return hashlib.sha256(built_from.encode("utf-8", "backslashreplace")).hexdigest()[:40]


def _load(hyperscan: Any, path: Path) -> Any | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, body = data[:DIGEST_BYTES], data[DIGEST_BYTES:]
    if len(digest) != DIGEST_BYTES or hashlib.sha256(body).digest() != digest:
        return None
    try:
        database = hyperscan.loadb(body, hyperscan.HS_MODE_BLOCK)
        database.scratch = hyperscan.Scratch(database)
    except hyperscan.error:
        return None
    return database


def _store(hyperscan: Any, database: Any, path: Path) -> None:
    body = hyperscan.dumpb(database)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(hashlib.sha256(body).digest() + body)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):  # the folder itself may be what failed
            partial.unlink(missing_ok=True)


def compiled_database(hyperscan: Any, expressions: Sequence[bytes], flags: Sequence[int],
                      directory: Path | None = None) -> Any:
    """A block-mode database of `expressions` (pattern id = index), from the cache or compiled (and cached)."""
    path = (directory or cache_dir()) / f"hyperscan-{database_key(hyperscan, expressions, flags)}.db"
    database = _load(hyperscan, path)
    if database is not None:
        return database
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(expressions=list(expressions), ids=list(range(len(expressions))), elements=len(expressions),
                     flags=list(flags))
    _store(hyperscan, database, path)
    return database
