"""The writer: byte ranges copied in the kernel, whole files hard-linked, sha256 trailing the writes."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.layout import COPY_CHUNK_BYTES, FLUSH_EVERY_BYTES, HASH_BUFFER_BYTES
from rlkeep.export.plan import PlannedShard
from rlkeep.export.safetensors_header import encode_safetensors_header
from rlkeep.export.sources import FileRange, StoreRange
from rlkeep.hashing import hash_range, sha256_file


def link_or_copy(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` (no second copy of a large file), or a copy where the
    filesystem refuses the link (another device, no link support)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


# Ranged GETs in flight while a shard is written: their latencies overlap (a rank's rows of one
# tensor are one GET), and at most STORE_READS_AHEAD pieces wait for an earlier one to land.
STORE_READERS = 4
STORE_READS_AHEAD = 64


class _TrailingHasher:
    """sha256 of a file read back from the page cache while it is written, trailing the writer,
    so the digest is of the bytes on disk and hashing overlaps the copy on another core."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._written = 0
        self._closed = False

    def advance(self, written: int) -> None:
        with self._cond:
            self._written = written
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def run(self) -> str:
        digest = hashlib.sha256()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            position = 0
            while True:
                with self._cond:
                    while self._written <= position and not self._closed:
                        self._cond.wait()
                    limit, closed = self._written, self._closed
                if os.fstat(fd).st_size < limit:
                    raise RlkeepError(f"{self.path}: shorter than the {limit} bytes written")
                hash_range(digest, fd, position, limit)
                position = limit
                if closed and position >= self._written:
                    return digest.hexdigest()
        finally:
            os.close(fd)


def _copy_range(src_fd: int, dst_fd: int, offset: int, length: int, dst_offset: int, src_path: Path) -> None:
    """Copy bytes between files in the kernel; plain pread/pwrite where copy_file_range is refused."""
    done = 0
    use_kernel = hasattr(os, "copy_file_range")
    while done < length:
        want = length - done
        if use_kernel:
            try:
                count = os.copy_file_range(src_fd, dst_fd, want, offset + done, dst_offset + done)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                    raise
                use_kernel = False
                continue
        else:
            chunk = os.pread(src_fd, min(want, HASH_BUFFER_BYTES), offset + done)
            count = len(chunk)
            _pwrite_all(dst_fd, memoryview(chunk), dst_offset + done)
        if count == 0:
            raise RlkeepError(f"{src_path}: ends at byte {offset + done}, before the {length} bytes its header "
                              f"promises from {offset} (truncated while reading)")
        done += count


class _FileAt:
    """A sink writing at a position of an open file; a store read that retries seeks back and writes again."""

    def __init__(self, fd: int, position: int) -> None:
        self.fd, self.position = fd, position

    def write(self, data: bytes) -> int:
        _pwrite_all(self.fd, memoryview(data), self.position)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def seek(self, position: int) -> int:
        self.position = position
        return position

    def truncate(self) -> None:
        """Nothing to cut: the retried read writes the same range again."""


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    data = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    while len(data):
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


class Writer:
    """Writes planned shards into a folder. Digests come from trailing hashers on a thread pool;
    a single syncer thread flushes each shard to disk while the next one is copied."""

    def __init__(self, out_dir: Path, pool: ThreadPoolExecutor) -> None:
        self.out_dir = out_dir
        self.pool = pool
        self.digests: dict[str, Future[str]] = {}
        self.reused: list[str] = []
        self._src_fds: dict[Path, int] = {}
        self._hashers: list[_TrailingHasher] = []
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlkeep-fsync")
        self._syncs: list[Future[None]] = []
        self._fetcher: ThreadPoolExecutor | None = None

    def finish(self) -> None:
        """Wait until every shard is on disk (raises the first fsync error)."""
        for future in self._syncs:
            future.result()

    def close(self) -> None:
        for hasher in self._hashers:
            hasher.close()
        self._syncer.shutdown(wait=True)
        if self._fetcher is not None:
            self._fetcher.shutdown(wait=True)
        for fd in self._src_fds.values():
            os.close(fd)
        self._src_fds.clear()

    def _src_fd(self, path: Path) -> int:
        if path not in self._src_fds:
            self._src_fds[path] = os.open(path, os.O_RDONLY)
        return self._src_fds[path]

    def _hash_behind(self, path: Path) -> _TrailingHasher:
        hasher = _TrailingHasher(path)
        self._hashers.append(hasher)
        self.digests[path.name] = self.pool.submit(hasher.run)
        return hasher

    def write_shard(self, shard: PlannedShard) -> None:
        target = self.out_dir / shard.name
        if shard.reuse is not None:
            link_or_copy(shard.reuse, target)
            self.reused.append(f"{shard.name} <- {shard.reuse}")
            self.digests[shard.name] = self.pool.submit(sha256_file, target)  # complete: nothing to trail
            self._syncs.append(self._syncer.submit(_fsync_path, target))  # a link shares the source's pages
            return
        header = encode_safetensors_header([(t.name, t.dtype, t.shape, t.nbytes) for t in shard.tensors])
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        # Store reads run on the fetch threads, each into its own range of the file; the hasher
        # trails the longest prefix whose pieces are all written.
        pending: deque[tuple[int, Future[Any]]] = deque()

        def settle(wait: bool) -> None:
            while pending and (wait or pending[0][1].done() or len(pending) > STORE_READS_AHEAD):
                end, future = pending.popleft()
                future.result()
                hasher.advance(end)
        try:
            hasher = self._hash_behind(target)
            _pwrite_all(fd, memoryview(header), 0)
            position = len(header)
            hasher.advance(position)
            flushed_at, flushing = 0, None
            for tensor in shard.tensors:
                start = position
                for piece in tensor.pieces:
                    if isinstance(piece, FileRange):
                        for offset in range(0, piece.length, COPY_CHUNK_BYTES):
                            length = min(COPY_CHUNK_BYTES, piece.length - offset)
                            _copy_range(self._src_fd(piece.path), fd, piece.offset + offset, length, position,
                                        piece.path)
                            position += length
                            pending.append((position, _done(None)))
                            settle(False)
                    elif isinstance(piece, StoreRange):
                        read = self._fetch_pool().submit(piece.store.read_range, piece.key, piece.offset, piece.length,
                                                         _FileAt(fd, position))
                        position += piece.length
                        pending.append((position, read))
                    else:
                        data = piece()
                        _pwrite_all(fd, data, position)
                        position += data.nbytes
                        pending.append((position, _done(None)))
                    settle(False)
                    # Start writeback early so the disk works while we copy, instead of at the end.
                    if position - flushed_at >= FLUSH_EVERY_BYTES and (flushing is None or flushing.done()):
                        flushing, flushed_at = self._syncer.submit(os.fdatasync, fd), position
                if position - start != tensor.nbytes:
                    raise RlkeepError(f"tensor {tensor.name!r}: wrote {position - start} bytes, expected "
                                      f"{tensor.nbytes} for {tensor.dtype}{list(tensor.shape)}")
            settle(True)
            hasher.close()
        except BaseException:
            for _, future in pending:
                future.cancel()
            wait_all([future for _, future in pending])  # no read may still write into fd once it is closed
            self._syncs.append(self._syncer.submit(os.close, fd))
            raise
        self._syncs.append(self._syncer.submit(_fsync_and_close, fd))

    def _fetch_pool(self) -> ThreadPoolExecutor:
        if self._fetcher is None:
            self._fetcher = ThreadPoolExecutor(max_workers=STORE_READERS, thread_name_prefix="rlkeep-ranged-get")
        return self._fetcher

    def write_small(self, name: str, data: bytes) -> None:
        fd = os.open(self.out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _pwrite_all(fd, memoryview(data), 0)
        except BaseException:
            os.close(fd)
            raise
        self._syncs.append(self._syncer.submit(_fsync_and_close, fd))
        self.digests[name] = _done(hashlib.sha256(data).hexdigest())


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def _fsync_path(path: Path) -> None:
    _fsync_and_close(os.open(path, os.O_RDONLY))


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)), thread_name_prefix="rlkeep-sha256")
