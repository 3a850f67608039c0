"""Compressed streams: a reader that refuses a bomb
(output past a ratio or a size), and a writer that compresses the same way again, byte for byte
the same for the same input (no time, no host in the output beyond what the original carried)."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

from rlkeep.redaction.common import CHUNK_SIZE

SUFFIXES = {"gzip": (".gz", ".gzip"), "bzip2": (".bz2",), "xz": (".xz",), "zstd": (".zst", ".zstd")}
SHORT_FOR_TAR = {".tgz": ".tar", ".tbz2": ".tar", ".txz": ".tar", ".tzst": ".tar"}

# A compressed stream may expand this many times before it is judged, then at most MAX_RATIO
# times its compressed bytes: real logs compress 5-50x, a run of zeros (a bomb) 1,000x (gzip) to
# millions (bzip2). Past either bound reading stops, so a bomb costs ~MIN_JUDGED of work.
MIN_JUDGED = 64 << 20
MAX_RATIO = 250
# Total bytes expanded out of one file on disk, all nesting levels together.
MAX_EXPANDED = 64 << 30


class Refused(Exception):
    """A stream or container rlkeep will not follow or cannot rewrite; the message says why."""


def inner_name(name: str, compression: str) -> str:
    """`creds.log.gz` holds `creds.log`; `logs.tgz` holds `logs.tar`."""
    lower = name.lower()
    for suffix, replacement in SHORT_FOR_TAR.items():
        if lower.endswith(suffix):
            return name[: -len(suffix)] + replacement
    for suffix in SUFFIXES[compression]:
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


class Budget:
    """Expanded bytes left for one file on disk, shared by every stream opened inside it."""

    def __init__(self, limit: int = MAX_EXPANDED) -> None:
        self.left = limit
        self.decompressed = 0  # bytes read through a decompressor (the benchmark reports the share)

    def take(self, count: int) -> None:
        self.left -= count
        self.decompressed += count
        if self.left < 0:
            raise Refused(f"expands past {MAX_EXPANDED >> 30} GiB in total; not followed (a bomb?)")


class _Counting(io.RawIOBase):
    def __init__(self, source: BinaryIO) -> None:
        self.source, self.count = source, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        data = self.source.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


class GuardedReader(io.RawIOBase):
    """The decompressed bytes of `source`; raises Refused past MAX_RATIO (once MIN_JUDGED bytes
    came out) or past the budget, and a clear Refused for a corrupt or truncated stream."""

    def __init__(self, source: BinaryIO, compression: str, budget: Budget) -> None:
        self._raw = _Counting(source)
        self._budget, self._compression, self._out = budget, compression, 0
        # small reads of the compressed side keep its count close, so the ratio trips near MIN_JUDGED
        buffered = io.BufferedReader(self._raw, 64 << 10)
        if compression == "gzip":
            self._stream: BinaryIO = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
        elif compression == "bzip2":
            self._stream = bz2.BZ2File(buffered)  # type: ignore[assignment]
        elif compression == "xz":
            self._stream = lzma.LZMAFile(buffered)  # type: ignore[assignment]
        else:
            self._stream = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        try:
            data = self._stream.read(min(len(buffer), CHUNK_SIZE))
        except (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError, ValueError) as error:
            raise Refused(f"{self._compression} stream is corrupt or truncated ({error})") from None
        self._out += len(data)
        self._budget.take(len(data))
        if self._out >= MIN_JUDGED and self._out > MAX_RATIO * max(1, self._raw.count):
            raise Refused(f"{self._compression} stream expands more than {MAX_RATIO}:1 "
                          f"({self._out} bytes from {self._raw.count}); not followed (a bomb?)")
        buffer[: len(data)] = data
        return len(data)


def open_decompressed(source: BinaryIO, compression: str, budget: Budget) -> BinaryIO:
    return io.BufferedReader(GuardedReader(source, compression, budget), CHUNK_SIZE)  # type: ignore[return-value]


@dataclass(frozen=True)
class GzipHeader:
    mtime: int
    name: bytes
    level: int


def gzip_header(head: bytes) -> GzipHeader:
    """The time, the original file name and the level (from XFL) a gzip header carries, so the
    rewritten file says the same."""
    flags = head[3] if len(head) > 3 else 0
    mtime = int.from_bytes(head[4:8], "little") if len(head) >= 8 else 0
    level = {2: 9, 4: 1}.get(head[8] if len(head) > 8 else 0, 6)
    position = 10
    if flags & 4 and len(head) >= 12:  # FEXTRA
        position += 2 + int.from_bytes(head[10:12], "little")
    name = b""
    if flags & 8:  # FNAME, NUL-terminated
        end = head.find(b"\0", position)
        name = head[position:end] if end >= 0 else b""
    return GzipHeader(mtime, name, level)


def open_compressor(out: BinaryIO, compression: str, head: bytes) -> BinaryIO:
    """A writer that compresses into `out` (left open when the writer closes)."""
    if compression == "gzip":
        header = gzip_header(head)
        return gzip.GzipFile(filename=header.name.decode("latin-1"), mode="wb", fileobj=out,  # type: ignore[return-value]
                             mtime=header.mtime, compresslevel=header.level)
    if compression == "bzip2":
        level = int(head[3:4]) if head[3:4].isdigit() else 9
        return bz2.BZ2File(out, "wb", compresslevel=level)  # type: ignore[return-value]
    if compression == "xz":
        return lzma.LZMAFile(out, "wb", format=lzma.FORMAT_XZ)  # type: ignore[return-value]
    return zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(out, closefd=False)  # type: ignore[return-value]
