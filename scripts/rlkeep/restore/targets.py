"""Where a restore writes: a local folder (the default) or a store prefix (`--to s3://...`).

Both stage a member while hashing it and give it its real name only on commit, so a member that
fails its check, or a restore that is stopped, leaves no file under a restored name. Neither
replaces an existing file or object unless the restore was asked to (`--overwrite`): the caller
asks `existing` first and refuses before anything is read.
"""
from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from rlkeep.errors import RlkeepError

PART_SUFFIX = ".rlkeep-part"
COPY_CHUNK = 1 << 20


def _copy_hashing(body: IO[bytes], out: IO[bytes]) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: body.read(COPY_CHUNK), b""):
        out.write(chunk)
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


class LocalTarget:
    """Files under a folder, at their archive member paths."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = Path(root).absolute()
        self.description = str(self.root)
        # an fsync per file makes a restore survive a power loss; the rehearsal's scratch tree is
        # deleted after the comparison, and thousands of fsyncs cost it most of its time
        self.durable = durable
        self._folders: set[Path] = set()  # made already: one mkdir per folder, not per file

    def path(self, name: str) -> Path:
        path = self.root / name
        if self.root not in path.parents:
            raise RlkeepError(f"restore: member {name!r} would land outside {self.root}; refusing it")
        return path

    def existing(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.path(name).exists()]

    def stage(self, name: str, body: IO[bytes]) -> tuple[int, str]:
        part = self._part(name)
        if part.parent not in self._folders:
            part.parent.mkdir(parents=True, exist_ok=True)
            self._folders.add(part.parent)
        with open(part, "wb") as out:
            result = _copy_hashing(body, out)
            if self.durable:
                out.flush()
                os.fsync(out.fileno())
        return result

    def commit(self, name: str) -> None:
        os.replace(self._part(name), self.path(name))

    def discard(self, name: str) -> None:
        self._part(name).unlink(missing_ok=True)

    def write_bytes(self, name: str, data: bytes) -> None:
        self.stage(name, _BytesBody(data))
        self.commit(name)

    def _part(self, name: str) -> Path:
        path = self.path(name)
        return path.with_name(path.name + PART_SUFFIX)


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)


class ComparingTarget:
    """A restore that writes only the members the comparison reads from files (a local folder), hands
    the ones it reads as bytes to `read` once their digest is checked, and checks every other one by
    its digest as it streams past: the scratch never holds the restored tree, the memory one member."""

    def __init__(self, root: Path, keep: Callable[[str], bool], read: Callable[[str, bytes], None] | None = None,
                 reads: Callable[[str], bool] = lambda name: False) -> None:
        self.local, self.keep, self.read, self.reads = LocalTarget(root, durable=False), keep, read, reads
        self.description = f"{self.local.description} (only the files compared; the rest checked by digest)"
        self._held: dict[str, bytes] = {}

    def existing(self, names: Iterable[str]) -> list[str]:
        return self.local.existing(name for name in names if self.keep(name))  # nothing else is written

    def stage(self, name: str, body: IO[bytes]) -> tuple[int, str]:
        if self.keep(name):
            return self.local.stage(name, body)
        if self.read is not None and self.reads(name):
            held = io.BytesIO()
            result = _copy_hashing(body, held)  # type: ignore[arg-type]
            self._held[name] = held.getvalue()
            return result
        return _copy_hashing(body, _Discard())  # type: ignore[arg-type]

    def commit(self, name: str) -> None:
        if self.keep(name):
            self.local.commit(name)
        elif name in self._held:
            assert self.read is not None
            self.read(name, self._held.pop(name))

    def discard(self, name: str) -> None:
        if self.keep(name):
            self.local.discard(name)
        self._held.pop(name, None)

    def write_bytes(self, name: str, data: bytes) -> None:
        self.local.write_bytes(name, data)


class StoreTarget:
    """Objects under a store prefix (s3:// or file://); each member is spilled to a local temp file,
    checked, then uploaded, so the store never holds a member that failed its check."""

    def __init__(self, url: str, scratch: Path | None = None) -> None:
        from rlkeep.storage import open_store

        self.store = open_store(url)
        self.description = url.rstrip("/")
        self.scratch = Path(tempfile.mkdtemp(prefix="rlkeep-restore-", dir=scratch))
        self._staged: dict[str, Path] = {}

    def existing(self, names: Iterable[str]) -> list[str]:
        present = {info.key for info in self.store.list("")}
        return [name for name in names if name in present]

    def stage(self, name: str, body: IO[bytes]) -> tuple[int, str]:
        spill = self.scratch / f"{len(self._staged)}.member"
        self._staged[name] = spill
        with open(spill, "wb") as out:
            return _copy_hashing(body, out)

    def commit(self, name: str) -> None:
        spill = self._staged.pop(name)
        try:
            self.store.put_file(name, spill)
        finally:
            spill.unlink(missing_ok=True)

    def discard(self, name: str) -> None:
        spill = self._staged.pop(name, None)
        if spill is not None:
            spill.unlink(missing_ok=True)

    def write_bytes(self, name: str, data: bytes) -> None:
        self.store.put_bytes(name, data)

    def close(self) -> None:
        for spill in self._staged.values():
            spill.unlink(missing_ok=True)
        self.scratch.rmdir()


class _BytesBody:
    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.offset + n
        chunk = self.data[self.offset:end]
        self.offset += len(chunk)
        return chunk
