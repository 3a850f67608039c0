"""Reading inside containers: a compressed stream (gzip, bzip2, xz, zstd), a tar, a zip, a parquet
or arrow file, nested up to MAX_DEPTH, streamed (a member that must be seekable, a zip or a
parquet inside a tar or a gzip, is spooled to one temp file at a time; nothing is extracted whole).

`Walker.process` reads one stream whose name is known. Without `out` it only scans: findings and
what could not be read (member path, reason) are collected. With `out` it writes the stream again,
each member redacted, in the same format and member order with the same metadata where the format
allows; members without findings (known from a scan before) are copied as they were. A member path
joins the names of each level with `::` (`logs.tar::ray/worker-1.out.gz::worker-1.out`).
"""
from __future__ import annotations

import codecs
import io
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

from rlkeep.redaction.common import CHUNK_SIZE, SEPARATOR, member_path
from rlkeep.redaction.engine import Redactor
from rlkeep.redaction.filetypes import MAX_SAFETENSORS_HEADER, SNIFF_SIZE, FileType, classify
from rlkeep.redaction.streams import MAX_RATIO, MIN_JUDGED, Budget, Refused, inner_name, open_compressor, open_decompressed

MAX_DEPTH = 6  # containers inside containers; deeper is refused (a quine-like zip nests forever)
_UNKNOWN_SIZE = 1 << 62
_SEEKING = ("zip", "parquet", "arrow")  # formats read by random access


class _Rewound(io.RawIOBase):
    """`head` (already read) followed by the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head, self._stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count], self._head = self._head[:count], self._head[count:]
            return count
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _WriteAll:
    """A redaction sink that writes every byte (redacted where it changed) to `out`."""

    def __init__(self, out: BinaryIO, encode: Callable[[bytes], bytes] | None = None) -> None:
        self._out, self._encode = out, encode

    def emit(self, original: memoryview, redacted: memoryview | None) -> None:
        data = original if redacted is None else redacted
        self._out.write(self._encode(bytes(data)) if self._encode else data)

    def finish(self) -> bool:
        return True

    def abort(self) -> None:
        pass


def _enclosing(path: str) -> Iterator[str]:
    """The path and every member that holds it: each prefix that a separator follows."""
    yield path
    at = path.find(SEPARATOR)
    while at != -1:
        yield path[:at]
        at = path.find(SEPARATOR, at + 1)


@dataclass
class Walker:
    """One file on disk: its findings (member, line, kind), what could not be read (member,
    reason), the bytes expanded so far, and (rewriting) the members a scan found secrets in."""

    redactor: Redactor
    work_dir: Path | None = None
    budget: Budget = field(default_factory=Budget)
    dirty: frozenset[str] | None = None  # None: scanning; else the members to rewrite
    findings: list[tuple[str, int, str]] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    # -- dispatch ---------------------------------------------------------------------------

    def process(self, stream: BinaryIO, name: str, where: str, out: BinaryIO | None, depth: int = 0,
                size: int = _UNKNOWN_SIZE) -> None:
        head = stream.read(SNIFF_SIZE)
        kind = classify(name, head, size)
        if kind.handling == "container" and kind.detail in _SEEKING and not _seekable(stream):
            with self._spooled(_Rewound(head, stream)) as spooled:  # type: ignore[arg-type]
                return self.process(spooled, name, where, out, depth, size)
        if _seekable(stream):
            stream.seek(-len(head), io.SEEK_CUR)
        else:
            stream = io.BufferedReader(_Rewound(head, stream), CHUNK_SIZE)  # type: ignore[assignment]
        if kind.handling == "container":
            if depth >= MAX_DEPTH:
                raise Refused(f"containers nested deeper than {MAX_DEPTH}; not followed")
            self._container(kind.detail, head, stream, name, where, out, depth)
        elif kind.handling in ("text", "wide"):
            self._text(kind, stream, where, out)
        elif kind.handling == "verbatim":  # strings stored as plain bytes: scanned, never rewritten
            if out is not None:
                raise Refused(f"credential-shaped text inside a {kind.detail} file, a format rlkeep cannot rewrite")
            self._text(FileType("text"), stream, where, None)
        elif kind.handling == "safetensors":
            self._safetensors(stream, where, out)
        else:
            if kind.handling == "binary":
                self.unreadable.append((where, f"not scanned: binary ({kind.detail})"))
            if out is not None:
                shutil.copyfileobj(stream, out, CHUNK_SIZE)

    def _container(self, what: str, head: bytes, stream: BinaryIO, name: str, where: str, out: BinaryIO | None,
                   depth: int) -> None:
        if what == "tar":
            self._tar(stream, where, out, depth)
        elif what == "zip":
            self._zip(stream, where, out, depth)
        elif what in ("parquet", "arrow"):
            from rlkeep.redaction.columnar import process_table  # pyarrow: only when one is met

            process_table(self.redactor, self.findings, what, stream, where, out)
        else:
            inner = inner_name(name.rsplit("/", 1)[-1], what)  # a compressed stream holds one file
            reader = open_decompressed(stream, what, self.budget)
            if out is None:
                path = member_path(where, inner)
                return self._guarded(lambda: self.process(reader, inner, path, None, depth + 1), path)
            with open_compressor(out, what, head) as writer:
                self.process(reader, inner, member_path(where, inner), writer, depth + 1)

    def __post_init__(self) -> None:
        # a member is rewritten when it had a finding or holds one: every prefix of a dirty path
        # that ends before a separator is dirty too, looked up in one set (a scan per member grew
        # with the square of the member count)
        self._dirty_or_holding: set[str] = set() if self.dirty is None else {
            prefix for path in self.dirty for prefix in _enclosing(path)}

    def is_dirty(self, where: str) -> bool:
        assert self.dirty is not None
        return where in self._dirty_or_holding

    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Rewrite these members too (a scan of them has just found secrets)."""
        assert self.dirty is not None
        self._dirty_or_holding.update(prefix for path in paths for prefix in _enclosing(path))

    def _spooled(self, source: BinaryIO) -> tempfile._TemporaryFileWrapper:  # type: ignore[type-arg]
        spool = tempfile.NamedTemporaryFile(prefix=".rlkeep-member-", dir=self.work_dir)
        try:
            shutil.copyfileobj(source, spool, CHUNK_SIZE)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return spool

    # -- leaves -----------------------------------------------------------------------------

    def _text(self, kind: FileType, stream: BinaryIO, where: str, out: BinaryIO | None) -> None:
        stream.read(len(kind.bom))
        read: Callable[[int], bytes] = stream.read
        encode = None
        if kind.handling == "wide":
            decoder = codecs.getincrementaldecoder(kind.detail)("surrogatepass")
            read = lambda size: decoder.decode(stream.read(size), final=False).encode("utf-8", "surrogatepass")  # noqa: E731
            utf8 = codecs.getincrementaldecoder("utf-8")("surrogatepass")
            encode = lambda data: utf8.decode(data).encode(kind.detail, "surrogatepass")  # noqa: E731
        if out is not None:
            out.write(kind.bom)
        found = self.redactor.redact_stream(read, None if out is None else _WriteAll(out, encode))
        self.findings += [(where, line, rule) for line, rule in found]

    def _safetensors(self, stream: BinaryIO, where: str, out: BinaryIO | None) -> None:
        length_bytes = stream.read(8)
        length = int.from_bytes(length_bytes, "little")
        if length > MAX_SAFETENSORS_HEADER:
            raise Refused(f"safetensors header of {length} bytes is past {MAX_SAFETENSORS_HEADER}")
        header = stream.read(length)
        redacted, found = self.redactor.redact_bytes(header)
        self.findings += [(where, line, rule) for line, rule in found]
        if out is None:
            return
        redacted = redacted.ljust(length, b" ") if len(redacted) <= length else redacted + b" " * (-len(redacted) % 8)
        out.write(len(redacted).to_bytes(8, "little") + redacted)
        shutil.copyfileobj(stream, out, CHUNK_SIZE)

    # -- tar --------------------------------------------------------------------------------

    def _tar(self, stream: BinaryIO, where: str, out: BinaryIO | None, depth: int) -> None:
        try:
            source = tarfile.open(fileobj=stream, mode="r|")
        except tarfile.TarError as error:
            raise Refused(f"not a readable tar ({error})") from None
        writer = None if out is None else tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)
        try:
            for member in source:
                inner = member_path(where, member.name)
                if not member.isfile():
                    if writer is not None:
                        writer.addfile(member)
                    continue
                body = source.extractfile(member)
                assert body is not None
                if writer is None:
                    self._guarded(lambda: self.process(body, member.name, inner, None, depth + 1, member.size), inner)
                elif not self.is_dirty(inner):
                    writer.addfile(member, body)
                else:
                    with self._rewritten(body, member.name, inner, depth, member.size) as redacted:
                        copy = tarfile.TarInfo(member.name)
                        copy.size = _size(redacted)
                        copy.mtime, copy.mode, copy.type = member.mtime, member.mode, member.type
                        copy.uid, copy.gid, copy.uname, copy.gname = member.uid, member.gid, member.uname, member.gname
                        copy.pax_headers = {k: v for k, v in member.pax_headers.items() if k != "size"}
                        writer.addfile(copy, redacted)
        except tarfile.TarError as error:
            raise Refused(f"tar is corrupt or truncated ({error})") from None
        finally:
            if writer is not None:
                writer.close()
            source.close()

    def _guarded(self, scan: Callable[[], None], where: str) -> None:
        """Scan a member; a member refused (bomb, corrupt, encrypted) is listed, the rest goes on."""
        try:
            scan()
        except Refused as error:
            self.unreadable.append((where, str(error)))

    def _rewritten(self, body: BinaryIO, name: str, where: str, depth: int, size: int):  # type: ignore[no-untyped-def]
        """The member redacted, in a temp file positioned at its start."""
        spool = tempfile.NamedTemporaryFile(prefix=".rlkeep-member-", dir=self.work_dir)
        try:
            self.process(body, name, where, spool, depth + 1, size)  # type: ignore[arg-type]
            spool.flush()
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return spool

    # -- zip --------------------------------------------------------------------------------

    def _zip(self, stream: BinaryIO, where: str, out: BinaryIO | None, depth: int) -> None:
        try:
            source = zipfile.ZipFile(stream)
        except (zipfile.BadZipFile, OSError) as error:
            raise Refused(f"not a readable zip ({error})") from None
        with source:
            infos = source.infolist()
            encrypted = [info.filename for info in infos if info.flag_bits & 0x1]
            if encrypted:
                raise Refused(f"encrypted zip (member {encrypted[0]}); rlkeep cannot read or redact it")
            if out is None:
                for info in infos:
                    inner = member_path(where, info.filename)
                    if not info.is_dir():
                        self._guarded(lambda: self._zip_member(source, info, inner, depth), inner)
                return
            self._zip_rewrite(source, infos, where, out, depth)

    def _zip_member(self, source: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, depth: int) -> None:
        # zipfile stops a member at its declared size, so the header's sizes bound the expansion
        if info.file_size >= MIN_JUDGED and info.file_size > MAX_RATIO * max(1, info.compress_size):
            raise Refused(f"zip member expands more than {MAX_RATIO}:1 ({info.file_size} bytes from "
                          f"{info.compress_size}); not followed (a bomb?)")
        self.budget.take(info.file_size)
        try:
            with source.open(info) as body:
                self.process(body, info.filename, where, None, depth + 1, info.file_size)  # type: ignore[arg-type]
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as error:
            raise Refused(f"zip member cannot be read ({error})") from None

    def _zip_rewrite(self, source: zipfile.ZipFile, infos: list[zipfile.ZipInfo], where: str, out: BinaryIO,
                     depth: int) -> None:
        with zipfile.ZipFile(out, "w") as writer:
            writer.comment = source.comment
            for info in infos:
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.compress_type, copy.external_attr = info.compress_type, info.external_attr
                copy.create_system, copy.comment = info.create_system, info.comment
                inner = member_path(where, info.filename)
                with source.open(info) as body:
                    if info.is_dir() or not self.is_dirty(inner):
                        with writer.open(copy, "w", force_zip64=info.file_size > (1 << 31)) as target:
                            shutil.copyfileobj(body, target, CHUNK_SIZE)
                        continue
                    with self._rewritten(body, info.filename, inner, depth, info.file_size) as redacted:  # type: ignore[arg-type]
                        with writer.open(copy, "w", force_zip64=_size(redacted) > (1 << 31)) as target:
                            shutil.copyfileobj(redacted, target, CHUNK_SIZE)


def _seekable(stream: BinaryIO) -> bool:
    """A file on disk (or a temp file): seeking is cheap and exact. A decompressed stream, a tar
    or zip member is read once, front to back."""
    try:
        stream.fileno()
        return bool(stream.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _size(handle: BinaryIO) -> int:
    position = handle.tell()
    end = handle.seek(0, io.SEEK_END)
    handle.seek(position)
    return end
