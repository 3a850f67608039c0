"""Streaming a store's objects into one deterministic tar: member headers, hashing, progress, the .part rename.

Members carry fixed metadata (mtime 0, mode 0644, no owners) so the same bytes give the same tar;
the archive is hashed while written and renamed into place only when complete. A refused read
(HTTP 403) is collected in TarStats and refused as a whole by refuse_denied.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rlkeep.errors import RlkeepError
from rlkeep.storage import ObjectDenied, ObjectInfo, Store, fetch_in_order

log = logging.getLogger(__name__)


@dataclass
class TarStats:
    objects_synced: int = 0
    bytes: int = 0
    objects_skipped: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    denied: ObjectDenied | None = None  # the first refusal (they all name the same credential)
    denied_keys: list[str] = field(default_factory=list)


def refuse_denied(stats: TarStats, where: str) -> None:
    """A sync with objects the store refused (HTTP 403) is not a sync: fail naming the first
    keys, how many, and whose credential was refused, before the tar or manifest is complete."""
    if stats.denied is None:
        return
    first = ", ".join(stats.denied_keys[:5])
    more = f" and {len(stats.denied_keys) - 5} more" if len(stats.denied_keys) > 5 else ""
    error = stats.denied
    raise RlkeepError(
        f"{where}: the store refused {len(stats.denied_keys)} of the listed objects (HTTP 403 {error.code}): "
        f"{first}{more}; {error.identity}. The credential reads only part of this prefix: use one that may "
        f"read all of it (nothing was synced)")


class HashingWriter(io.RawIOBase):
    """A write-only file that hashes what passes through (tarfile writes sequentially)."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sink.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:  # tarfile's "w" mode asks where the archive starts
        return self.size


class Progress:
    """Objects and bytes done, rate and time left: a bar on a terminal, periodic log lines otherwise."""

    def __init__(self, label: str, total_objects: int, total_bytes: int, every_s: float = 10.0) -> None:
        self.label, self.total_objects, self.total_bytes, self.every_s = label, total_objects, total_bytes, every_s
        self.objects = self.bytes = 0
        self.started = self.last = time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc=label)

    def update(self, size: int) -> None:
        self.objects += 1
        self.bytes += size
        if self.bar is not None:
            self.bar.update(size)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            log.info("%s", self.line())

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.bytes / elapsed
        left = (self.total_bytes - self.bytes) / rate if rate > 0 else float("inf")
        return (f"{self.label}: {self.objects}/{self.total_objects} objects, {self.bytes / 1e6:.1f}/"
                f"{self.total_bytes / 1e6:.1f} MB, {self.objects / elapsed:.0f} objects/s, {rate / 1e6:.1f} MB/s, "
                f"{left:.0f}s left")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        log.info("%s (finished)", self.line())


def tar_member(name: str, size: int) -> tarfile.TarInfo:
    """Deterministic member metadata: the same bytes in give the same tar out."""
    member = tarfile.TarInfo(name)
    member.size = size
    member.mtime = 0
    member.mode = 0o644
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(tar_member(name, len(data)), io.BytesIO(data))


def _ustar_template() -> tuple[bytes, bytes, bytes]:
    """The fixed parts of tar_member's ustar block, taken from tarfile itself: mode/uid/gid,
    mtime, and everything after the checksum (type, magic, empty owner names, device fields)."""
    block = tar_member("x", 0).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return block[100:124], block[136:148], block[156:512]


_USTAR_FIXED = _ustar_template()


def member_header(name: str, size: int) -> bytes:
    """The header block(s) of tar_member(name, size), as tarfile writes them in PAX format.

    A short ASCII name (the usual trace key) gets its 512-byte ustar block built here, byte for
    byte what tarfile's PAX_FORMAT writes for it, at a tenth of tarfile's cost; a longer name
    that ustar's prefix field holds is a plain ustar header too; only a name ustar cannot hold
    (non-ASCII, or no split under 155 + 100 bytes) takes a PAX extended header."""
    if len(name) <= 100 and name.isascii() and size < 0o77777777777:
        head = name.encode("ascii").ljust(100, b"\x00") + _USTAR_FIXED[0] + b"%011o\x00" % size + _USTAR_FIXED[1]
        tail = _USTAR_FIXED[2]
        checksum = sum(head) + sum(tail) + 8 * 32  # the checksum field counts as eight spaces
        return head + b"%06o\x00 " % checksum + tail
    member = tar_member(name, size)
    if name.isascii():
        try:
            return member.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
        except ValueError:  # no split of the name fits ustar's prefix + name fields
            pass
    return member.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def append_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """One member written straight to a TarOutput's archive in one write: header, data, padding."""
    header = member_header(name, len(data))
    padding = -len(data) % tarfile.BLOCKSIZE
    tar.fileobj.write(b"".join((header, data, tarfile.NUL * padding)))  # type: ignore[union-attr]
    tar.offset += len(header) + len(data) + padding


def stream_objects_into_tar(
    tar: tarfile.TarFile,
    store: Store,
    infos: list[ObjectInfo],
    member_name: Any,
    *,
    stats: TarStats,
    workers: int,
    max_inflight_bytes: int,
    label: str,
) -> None:
    progress = Progress(label, len(infos), sum(i.size for i in infos))
    try:
        for fetched in fetch_in_order(store, infos, workers=workers, max_inflight_bytes=max_inflight_bytes):
            info = fetched.info
            if fetched.denied is not None:
                stats.denied = stats.denied or fetched.denied
                stats.denied_keys.append(info.key)
                progress.update(0)
                continue
            if fetched.body is None:
                stats.objects_skipped.append({"key": info.key, "size": info.size, "reason": "missing_after_listing"})
                progress.update(0)
                continue
            try:
                if isinstance(fetched.body, io.BytesIO):
                    append_member(tar, member_name(info), fetched.body.getvalue())
                else:  # spilled to disk: copied in chunks
                    tar.addfile(tar_member(member_name(info), info.size), fetched.body)
            finally:
                fetched.close()
            stats.objects_synced += 1
            stats.bytes += info.size
            stats.objects.append({"key": info.key, "size": info.size, "sha256": fetched.sha256})
            progress.update(info.size)
    finally:
        progress.close()


class TarOutput:
    """A tar written under a temporary name, hashed while written, renamed when complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.part")

    def __enter__(self) -> tuple[tarfile.TarFile, HashingWriter]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.tmp, "wb")
        try:
            self.hasher = HashingWriter(self.handle)
            # "w" on the hashing writer (it tells its size): members go straight to it, no stream buffer
            self.tar = tarfile.open(fileobj=self.hasher, mode="w", format=tarfile.PAX_FORMAT)  # type: ignore[arg-type]
        except BaseException:  # e.g. a stop just after the open: `with` calls no __exit__ when __enter__ raises
            self.handle.close()
            self.tmp.unlink(missing_ok=True)
            raise
        return self.tar, self.hasher

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            try:
                self.tar.close()  # writes the end-of-archive blocks: can itself fail (ENOSPC)
                self.handle.flush()
                os.fsync(self.handle.fileno())
            finally:
                self.handle.close()
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            if exc_type is None:
                raise
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)
        else:
            os.replace(self.tmp, self.path)
