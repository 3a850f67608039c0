"""Writing in place: a temp file in the same directory, then os.replace; untouched files are not
rewritten at all. UTF-16/32 files are read as UTF-8 and written back in their own encoding."""
from __future__ import annotations


import codecs
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Protocol


from rlkeep.errors import RlkeepError
from rlkeep.redaction.common import CHUNK_SIZE


class Sink(Protocol):
    def emit(self, original: memoryview, redacted: memoryview | None) -> None: ...
    def finish(self) -> bool: ...
    def abort(self) -> None: ...


def temp_beside(path: Path) -> tuple[int, str]:
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".redacting", dir=path.parent)


def install(tmp: str, handle: BinaryIO, path: Path, mode: int) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.chmod(tmp, stat.S_IMODE(mode))
    os.replace(tmp, path)


class _TempBeside:
    """A temp file beside `path` that replaces it (fsynced, mode kept) or is removed."""

    def __init__(self, path: Path, mode: int) -> None:
        self._path, self._mode = path, mode
        self._tmp: str | None = None
        self._handle: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        fd, self._tmp = temp_beside(self._path)
        self._handle = os.fdopen(fd, "wb")
        return self._handle

    def _install(self) -> bool:
        assert self._tmp is not None and self._handle is not None
        install(self._tmp, self._handle, self._path, self._mode)
        self._tmp = self._handle = None
        return True

    def abort(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._tmp is not None:
            Path(self._tmp).unlink(missing_ok=True)


class LazyRewriter(_TempBeside):
    """Opens the temp file at the first change, copying the unchanged prefix from the source."""

    def __init__(self, path: Path, source_fd: int, mode: int) -> None:
        super().__init__(path, mode)
        self._source_fd = source_fd
        self._unchanged = 0

    def emit(self, original: memoryview, redacted: memoryview | None) -> None:
        if redacted is None and self._handle is None:
            self._unchanged += len(original)
            return
        handle = self._handle or self._copy_unchanged()
        handle.write(original if redacted is None else redacted)

    def _copy_unchanged(self) -> BinaryIO:
        handle = self._open()
        copied = 0
        while copied < self._unchanged:
            block = os.pread(self._source_fd, min(CHUNK_SIZE, self._unchanged - copied), copied)
            if not block:
                raise RlkeepError(f"{self._path}: file shrank while it was being redacted")
            handle.write(block)
            copied += len(block)
        return handle

    def finish(self) -> bool:
        return self._handle is not None and self._install()


class TranscodingRewriter(_TempBeside):
    """For UTF-16/32 files: everything is written back in the file's encoding; kept only if changed."""

    def __init__(self, path: Path, encoding: str, bom: bytes, mode: int) -> None:
        super().__init__(path, mode)
        self._encoding = encoding
        self._open().write(bom)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogatepass")
        self._changed = False
        self.trailing = b""

    def emit(self, original: memoryview, redacted: memoryview | None) -> None:
        assert self._handle is not None
        self._changed = self._changed or redacted is not None
        text = self._decoder.decode(bytes(original) if redacted is None else redacted)
        self._handle.write(text.encode(self._encoding, "surrogatepass"))

    def finish(self) -> bool:
        assert self._handle is not None
        self._handle.write(self._decoder.decode(b"", final=True).encode(self._encoding, "surrogatepass"))
        self._handle.write(self.trailing)
        if not self._changed:
            self.abort()
            return False
        return self._install()


class TranscodingReader:
    """Reads UTF-16/32 code units and hands out UTF-8 (lone surrogates pass through both ways)."""

    def __init__(self, handle: BinaryIO, encoding: str, unit: int) -> None:
        self._handle, self._encoding, self._unit = handle, encoding, unit
        self.trailing = b""  # an incomplete last code unit, written back unchanged

    def read(self, size: int) -> bytes:
        size -= size % self._unit
        data = self._handle.read(size)
        if len(data) % self._unit:
            cut = len(data) - len(data) % self._unit
            data, self.trailing = data[:cut], data[cut:]
        return data.decode(self._encoding, "surrogatepass").encode("utf-8", "surrogatepass")
