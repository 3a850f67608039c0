"""Bulk transfers over any Store: fetch_in_order reads many objects concurrently and hands them
over in the given order with bounded memory; upload_tree copies a local tree to a store."""
from __future__ import annotations

import io
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import IO

from rlkeep.errors import StoreError
from rlkeep.storage.objects import FetchedObject, ObjectChanged, ObjectDenied, ObjectInfo, ObjectMissing, Store

BATCH_OBJECTS = 16  # small objects fetched back to back by one worker: one hand-off per batch
BATCH_BYTES = 1 << 20

Pending = deque[tuple[int, Future[list[FetchedObject]]]]  # (listed bytes, the batch's fetch), in order


class _CappedBuffer(io.BytesIO):
    """An in-memory body that refuses to grow past the listed size, so an object replaced by a
    larger one after listing cannot take memory beyond the fetch window."""

    def __init__(self, listed_size: int, what: str) -> None:
        super().__init__()
        self.cap, self.what = listed_size, what

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.cap:
            raise ObjectChanged(f"{self.what}: larger than the {self.cap} bytes listed; the object changed during sync")
        return super().write(data)


def _batches(infos: Iterable[ObjectInfo], most: int = BATCH_OBJECTS) -> Iterator[list[ObjectInfo]]:
    """Consecutive runs of small objects (up to `most` and BATCH_BYTES); large objects alone."""
    batch: list[ObjectInfo] = []
    size = 0
    for info in infos:
        if batch and (len(batch) == most or size + info.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(info)
        size += info.size
    if batch:
        yield batch


def fetch_object(store: Store, info: ObjectInfo, spill_bytes: int) -> FetchedObject:
    """Read one listed object into memory (on disk beyond spill_bytes), checking the listed size.
    A vanished object comes back without a body; a denied one with the refusal."""
    body: IO[bytes]
    if info.size <= spill_bytes:
        body = _CappedBuffer(info.size, store.url_of(info.key))
    else:
        body = tempfile.SpooledTemporaryFile(max_size=spill_bytes)  # type: ignore[assignment]
    try:
        size, digest = store.read_into(info.key, body)
    except ObjectMissing:
        body.close()
        return FetchedObject(info, None, None)
    except ObjectDenied as denied:
        body.close()
        return FetchedObject(info, None, None, denied)
    except BaseException:
        body.close()
        raise
    if size != info.size:
        body.close()
        raise StoreError(f"{store.url_of(info.key)}: listed with {info.size} bytes but read {size}; the object changed during sync")
    body.seek(0)
    return FetchedObject(info, body, digest)


def fetch_batch(store: Store, batch: list[ObjectInfo], spill_bytes: int) -> list[FetchedObject]:
    """fetch_object for each of a batch, back to back; on failure the ones already read are closed."""
    done: list[FetchedObject] = []
    try:
        for info in batch:
            done.append(fetch_object(store, info, spill_bytes))
    except BaseException:
        for fetched in done:
            fetched.close()
        raise
    return done


def _submit_more(pool: ThreadPoolExecutor, fetch: Callable[[list[ObjectInfo]], list[FetchedObject]],
                 source: Iterator[list[ObjectInfo]], pending: Pending, inflight: int, *, workers: int,
                 max_inflight_bytes: int) -> tuple[int, bool]:
    """Hand batches to the pool until two per worker wait or max_inflight_bytes (by listed size) are
    in flight, always at least one: (bytes in flight, whether the source ran out)."""
    while len(pending) < workers * 2 and (inflight < max_inflight_bytes or not pending):
        batch = next(source, None)
        if batch is None:
            return inflight, True
        size = sum(info.size for info in batch)
        pending.append((size, pool.submit(fetch, batch)))
        inflight += size
    return inflight, False


def _hand_over(results: list[FetchedObject]) -> Iterator[FetchedObject]:
    """Yield a batch's objects; when the consumer stops, close the ones it will never see."""
    for index, result in enumerate(results):
        try:
            yield result
        except BaseException:
            for later in results[index + 1:]:
                later.close()
            raise


def _close_pending(pending: Pending) -> None:
    """Cancel the batches not started; close the bodies of those that finished unconsumed."""
    for _, future in pending:
        if not future.cancel() and future.done() and future.exception() is None:
            for fetched in future.result():
                fetched.close()


def fetch_in_order(
    store: Store,
    infos: Iterable[ObjectInfo],
    *,
    workers: int = 16,
    max_inflight_bytes: int = 128 << 20,
    spill_bytes: int = 16 << 20,
) -> Iterator[FetchedObject]:
    """Fetch many objects concurrently and yield them in the given order.

    At most `workers` requests run at once and at most `max_inflight_bytes` (by listed size)
    wait to be consumed; each body lives in memory up to `spill_bytes` and on disk beyond,
    so memory is bounded by the concurrency, not by the object count or the largest object.
    Small objects go to the workers in batches: with thousands of 1-50 KB objects, handing
    each one to a thread and back costs as much CPU as its request.
    The consumer closes each FetchedObject when done with it.
    """
    # a short list is cut finer, so that every worker has a batch (all requests in flight at once)
    most = max(1, min(BATCH_OBJECTS, len(infos) // workers)) if isinstance(infos, list) else BATCH_OBJECTS
    source = _batches(infos, most)
    fetch = partial(fetch_batch, store, spill_bytes=spill_bytes)
    pending: Pending = deque()
    inflight, exhausted = 0, False
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
        try:
            while True:
                if not exhausted:
                    inflight, exhausted = _submit_more(pool, fetch, source, pending, inflight, workers=workers,
                                                       max_inflight_bytes=max_inflight_bytes)
                if not pending:
                    return
                size, future = pending.popleft()
                results = future.result()
                inflight -= size
                yield from _hand_over(results)
        finally:
            _close_pending(pending)


def upload_tree(root: Path, store: Store, *, workers: int = 16) -> int:
    """Copy every file under root to the store under the same relative keys; returns the count."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda path: store.put_file(path.relative_to(root).as_posix(), path), files))
    return len(files)
