"""File digests: the one sha256-of-a-file helper every module uses (store, Hub, traces, export), and
the reader that hashes a stream as it is read (tars read front to back: traces, archive).

Bytes are fed to the digest from mapped windows of the page cache instead of read() copies:
hashing is the CPU floor of consolidation and of staging, and a copy into a buffer costs about
a third again. Windows are unmapped as they are done, so the pages never add up in the resident
set. The file must not shrink while it is hashed (rlkeep only hashes files it wrote or fetched).
"""
from __future__ import annotations

import hashlib
import mmap
import os
from typing import IO, Any

HASH_WINDOW_BYTES = 32 << 20  # a multiple of mmap.ALLOCATIONGRANULARITY


def hash_range(digest: Any, fd: int, start: int, end: int) -> None:
    """Feed bytes [start, end) of the open file fd to digest (a hashlib object)."""
    granularity = mmap.ALLOCATIONGRANULARITY
    position = start
    while position < end:
        base = position - position % granularity
        length = min(HASH_WINDOW_BYTES, end - base)
        window = mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=base)
        try:
            window.madvise(mmap.MADV_SEQUENTIAL)
            with memoryview(window) as view:
                digest.update(view[position - base:])
        finally:
            window.close()
        position = base + length


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a regular file's bytes."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        hash_range(digest, fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return digest.hexdigest()


class HashingReader:
    """A reader front to back that hashes and counts every byte read through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data

    def read_to_end(self, chunk: int = 1 << 20) -> tuple[int, str]:
        """Read what is left; the size and hex sha256 of every byte read."""
        while self.read(chunk):
            pass
        return self.size, self.digest.hexdigest()
