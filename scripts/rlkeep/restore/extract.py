"""Extract a streamed archive member by member into a target, holding each file to the MANIFEST.

Nothing is half-restored: a member is written under a temporary name (or spilled, for a store
target) while it is hashed, and takes its real name only when its size and sha256 are the
MANIFEST's. A member that differs is named and left out; a stream that ends early (a truncated
or unreadable archive) stops the extraction, keeps what was restored and names the rest.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from isal import igzip, isal_zlib

from rlkeep.archive.manifest import MANIFEST_MEMBER, ManifestEntry
from rlkeep.errors import RlkeepError

READ_CHUNK = 1 << 20
SHOWN = 20  # problems named one by one in a message; the rest are counted


class ArchiveReadError(Exception):
    """Reading the archive stream failed (truncated, corrupt, or the store's read broke)."""


class Target(Protocol):
    """Where restored files go: a local folder or a store prefix (rlkeep.restore.targets)."""

    description: str

    def existing(self, names: Iterable[str]) -> list[str]: ...

    def stage(self, name: str, body: IO[bytes]) -> tuple[int, str]: ...  # (size, sha256) of what was staged

    def commit(self, name: str) -> None: ...

    def discard(self, name: str) -> None: ...


@dataclass
class Extraction:
    """What one pass over the archive stream found."""

    restored: list[str] = field(default_factory=list)
    restored_bytes: int = 0
    corrupt: list[str] = field(default_factory=list)  # "member: why"
    unlisted: list[str] = field(default_factory=list)  # members the MANIFEST does not keep (not restored)
    unchecked: list[str] = field(default_factory=list)  # restored, size checked, but no sha256 in the MANIFEST
    ended_early: str | None = None
    embedded_manifest: bytes | None = None
    archive_bytes: int = 0
    archive_sha256: str = ""

    def missing(self, kept: dict[str, ManifestEntry]) -> list[str]:
        seen = set(self.restored) | {line.split(":", 1)[0] for line in self.corrupt}
        return [name for name in kept if name not in seen]

    def problems(self, kept: dict[str, ManifestEntry], manifest_bytes: bytes) -> list[str]:
        """Everything that keeps the restore from being whole, worst first."""
        found: list[str] = []
        if self.ended_early:
            found.append(f"the archive stream ended early: {self.ended_early}")
        missing = self.missing(kept)
        if missing:
            found.append(f"{len(missing)} member(s) the MANIFEST keeps are missing from the archive: "
                         + ", ".join(missing[:SHOWN]) + (" ..." if len(missing) > SHOWN else ""))
        found += [f"member {line}" for line in self.corrupt[:SHOWN]]
        if len(self.corrupt) > SHOWN:
            found.append(f"and {len(self.corrupt) - SHOWN} more corrupt member(s)")
        if self.unlisted:
            found.append(f"{len(self.unlisted)} archive member(s) the MANIFEST does not keep were not restored: "
                         + ", ".join(self.unlisted[:SHOWN]))
        if self.embedded_manifest is not None and self.embedded_manifest != manifest_bytes:
            found.append(f"the archive's own {MANIFEST_MEMBER} member differs from the MANIFEST object beside it")
        return found

    def evidence(self, kept: dict[str, ManifestEntry]) -> dict[str, Any]:
        return {"restored_files": len(self.restored), "restored_bytes": self.restored_bytes,
                "expected_files": len(kept), "missing": self.missing(kept), "corrupt": self.corrupt,
                "unlisted": self.unlisted, "unchecked_sha256": len(self.unchecked), "ended_early": self.ended_early,
                "archive_bytes": self.archive_bytes, "archive_sha256": self.archive_sha256}


class _Hashing(io.RawIOBase):
    """Counts and hashes the raw archive bytes as gzip reads them; read failures become ArchiveReadError."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.handle.read(len(buffer))
        except Exception as error:  # noqa: BLE001 - any failure of the source ends the stream, named
            raise ArchiveReadError(str(error)) from error
        buffer[: len(data)] = data
        self.digest.update(data)
        self.size += len(data)
        return len(data)


class _MemberBody:
    """A member's bytes from the tar stream; a failure to read them is the archive's, not the target's."""

    def __init__(self, body: IO[bytes]) -> None:
        self.body = body

    def read(self, n: int = -1) -> bytes:
        try:
            return self.body.read(n)
        except (tarfile.TarError, EOFError, OSError, zlib.error, ArchiveReadError) as error:
            raise ArchiveReadError(f"{type(error).__name__}: {error}") from error


def _unsafe(name: str) -> bool:
    clean = name.removeprefix("./")
    return (not clean or clean.startswith("/") or "\x00" in clean or "\\" in clean
            or any(part in {"", ".", ".."} for part in clean.split("/")))


def _restore_member(info: tarfile.TarInfo, tar: tarfile.TarFile, kept: dict[str, ManifestEntry], target: Target,
                    found: Extraction) -> None:
    entry = kept.get(info.name)
    if entry is None or not info.isfile() or _unsafe(info.name):
        found.unlisted.append(info.name)
        return
    body = tar.extractfile(info)
    if body is None:
        found.corrupt.append(f"{info.name}: no data in the archive")
        return
    try:
        size, sha256 = target.stage(info.name, _MemberBody(body))  # type: ignore[arg-type]
    except BaseException:
        target.discard(info.name)
        raise
    if size != entry.size or (entry.sha256 is not None and sha256 != entry.sha256):
        target.discard(info.name)
        want = f"{entry.size} bytes" + (f", sha256 {entry.sha256}" if entry.sha256 else "")
        found.corrupt.append(f"{info.name}: {size} bytes with sha256 {sha256} in the archive, the MANIFEST says {want}")
        return
    target.commit(info.name)
    found.restored.append(info.name)
    found.restored_bytes += size
    if entry.sha256 is None:
        found.unchecked.append(info.name)


def extract(stream: IO[bytes], kept: dict[str, ManifestEntry], target: Target) -> Extraction:
    """Restore every kept member of the gzip tar `stream` into target; see the module docstring."""
    found = Extraction()
    raw = _Hashing(stream)
    buffered = io.BufferedReader(raw, READ_CHUNK)
    try:
        with igzip.GzipFile(fileobj=buffered, mode="rb") as gz:  # ISA-L: 2-3x zlib's inflate
            with tarfile.open(fileobj=gz, mode="r|") as tar:  # type: ignore[call-overload]
                for info in tar:
                    if info.name == MANIFEST_MEMBER and info.isfile():
                        handle = tar.extractfile(info)
                        found.embedded_manifest = _MemberBody(handle).read() if handle is not None else None
                        continue
                    _restore_member(info, tar, kept, target, found)
            while gz.read(READ_CHUNK):  # to the end: gzip checks its CRC and length there
                pass
        while buffered.read(READ_CHUNK):
            pass
    except (tarfile.TarError, EOFError, zlib.error, isal_zlib.error, ArchiveReadError, gzip.BadGzipFile) as error:
        found.ended_early = f"{type(error).__name__}: {error}"
    except OSError as error:
        if isinstance(error.__cause__, ArchiveReadError) or error.filename is None and error.errno is None:
            found.ended_early = f"{type(error).__name__}: {error}"
        else:
            raise
    found.archive_bytes, found.archive_sha256 = raw.size, raw.digest.hexdigest()
    return found


def kept_entries(entries: Iterable[ManifestEntry]) -> dict[str, ManifestEntry]:
    """The MANIFEST's kept members by name, with the MANIFEST itself (restored beside them)."""
    kept = {entry.member: entry for entry in entries if entry.reason is None}
    if MANIFEST_MEMBER in kept:
        raise RlkeepError(f"the MANIFEST lists a member named {MANIFEST_MEMBER}, which is the MANIFEST's own name")
    return kept
