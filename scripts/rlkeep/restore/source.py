"""Where a run's archive is, and a streamed reader of it.

An archive lives at `<base>/<job>_archive.tgz` and `<base>/MANIFEST`, where base is
`<archive.dest>/<job>` (s3://, file://, or hf://datasets/<org>/<name> at a commit), or the data
root's `<job>/archive/` when the record names no destination. The store's own read (retries,
SlowDown, presigned GETs) pushes bytes into a sink; tarfile pulls them: `_PushedReader` joins the
two through a bounded queue, so the tgz is never written to disk.
"""
from __future__ import annotations

import hashlib
import io
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import read_json
from rlkeep.urls import join_url

HF_DATASET_PREFIX = "hf://datasets/"
QUEUED_CHUNKS = 16  # bytes in flight between the store's read and the extraction: 16 x the store's chunk


@dataclass(frozen=True)
class ArchiveLocation:
    base: str  # URL of the folder holding the tgz and MANIFEST (file://, s3://, hf://datasets/<org>/<name>/<job>)
    job: str
    revision: str | None = None  # a Hub dataset's commit (None: its main branch)
    sha256: str | None = None  # of the tgz as verified, when a verification recorded it

    @property
    def tgz_name(self) -> str:
        return f"{self.job}_archive.tgz"

    def describe(self) -> str:
        at = f" at commit {self.revision}" if self.revision else ""
        return join_url(self.base, self.tgz_name) + at


def location_from_url(url: str, job: str, revision: str | None = None) -> ArchiveLocation:
    """The archive of `job` under a destination URL (archive.dest as the record names it)."""
    if not job or "/" in job or job in {".", ".."}:
        raise RlkeepError(f"restore: job {job!r} is not a valid folder name")
    if not url.startswith(("s3://", "file://", HF_DATASET_PREFIX)):
        raise RlkeepError(f"restore: --from {url!r}: expected s3://bucket/prefix, file:///path or "
                          "hf://datasets/<org>/<name> (the record's archive.dest)")
    return ArchiveLocation(f"{url.rstrip('/')}/{job}", job, revision)


def location_from_job_dir(job_dir: Path, job: str) -> ArchiveLocation:
    """The archive verify_archive verified (verify/archive.json): the remote copy, else the local one."""
    sentinel_path = Path(job_dir) / "verify" / "archive.json"
    if not sentinel_path.is_file():
        raise RlkeepError(f"{sentinel_path}: missing, so where {job}'s archive is is not known here; run the "
                          f"pipeline to verify_archive first, or name the destination: rlkeep restore {job} --from "
                          "<archive.dest URL>")
    sentinel = read_json(sentinel_path)
    local = sentinel.get("local") if isinstance(sentinel.get("local"), dict) else {}
    remote = sentinel.get("remote")
    if isinstance(remote, dict):
        if not isinstance(remote.get("dest"), str):
            raise RlkeepError(f"{sentinel_path}: field 'remote.dest' is missing; expected the archive's URL")
        return ArchiveLocation(remote["dest"].rstrip("/"), job, remote.get("commit"), local.get("sha256"))
    tgz = local.get("tgz")
    if not isinstance(tgz, str):
        raise RlkeepError(f"{sentinel_path}: field 'local.tgz' is missing; expected the verified archive's path")
    return ArchiveLocation(Path(tgz).absolute().parent.as_uri(), job, None, local.get("sha256"))


# --------------------------------------------------------------------------- readers


class _PushedReader(io.RawIOBase):
    """The read end of a sink that another thread's `read_into` writes to.

    The store rewinds its sink (seek back, truncate) when a read breaks and restarts from the
    object's first byte; bytes already handed over are then skipped, not sent twice. Whether the
    restarted body was the same is checked at the end: the digest of what was handed over must
    equal the digest of the final read.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(QUEUED_CHUNKS)
        self._position = 0  # where the store's current attempt is
        self._handed = 0  # bytes put on the queue so far
        self._buffer = b""
        self._closed_by_reader = threading.Event()
        self.digest = hashlib.sha256()

    # the sink side (the store's thread)
    def write(self, data: Any) -> int:  # type: ignore[override]
        data = bytes(data)
        skip = max(0, min(len(data), self._handed - self._position))
        self._position += len(data)
        if skip < len(data):
            fresh = data[skip:]
            self.digest.update(fresh)
            self._handed += len(fresh)
            self._put(fresh)
        return len(data)

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._closed_by_reader.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        raise RlkeepError("the restore stopped reading the archive")

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = position
        return position

    def truncate(self, size: int | None = None) -> int:
        return self._position

    # the reader side (tarfile)
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._buffer:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)  # stay at the end for later reads
                return 0
            if isinstance(item, BaseException):
                self._queue.put(item)
                raise item
            self._buffer = item
        count = min(len(buffer), len(self._buffer))
        buffer[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count

    def stop(self) -> None:
        self._closed_by_reader.set()


@contextmanager
def _store_reader(base: str, name: str) -> Iterator[IO[bytes]]:
    from rlkeep.storage import open_store

    store = open_store(base)
    pipe = _PushedReader()
    result: dict[str, Any] = {}

    def produce() -> None:
        try:
            result["size"], result["sha256"] = store.read_into(name, pipe)  # type: ignore[arg-type]
            if result["sha256"] != pipe.digest.hexdigest():
                raise RlkeepError(f"{join_url(base, name)}: the object changed while it was read (a restarted read gave other "
                                  "bytes); run the restore again")
            pipe._put(None)
        except BaseException as error:  # noqa: BLE001 - handed to the reading thread, which raises it
            try:
                pipe._put(error)
            except RlkeepError:
                pass

    thread = threading.Thread(target=produce, name=f"read {name}", daemon=True)
    thread.start()
    reader = io.BufferedReader(pipe, 1 << 20)
    try:
        yield reader
    finally:
        pipe.stop()
        thread.join()


@contextmanager
def _hub_reader(base: str, name: str, revision: str | None) -> Iterator[IO[bytes]]:
    # huggingface_hub costs about half a second to import: only a Hub archive pays for it. rlkeep.hub
    # first: it sets the environment huggingface_hub reads when imported.
    from rlkeep.hub.client import resolve_target

    from huggingface_hub import HfFileSystem  # isort: skip

    target = resolve_target()
    target.api()  # Xet off and the Hub's 429s waited out, as for every other Hub call
    parts = base[len(HF_DATASET_PREFIX):].strip("/").split("/")
    repo_id, folder = "/".join(parts[:2]), "/".join(parts[2:])
    filesystem = HfFileSystem(endpoint=target.endpoint, token=target.token if target.token else False)
    at = f"@{revision}" if revision else ""
    path = f"datasets/{repo_id}{at}/{folder}/{name}"
    try:
        handle = filesystem.open(path, "rb", block_size=0)
    except FileNotFoundError:
        raise FileNotFoundError(join_url(base, name)) from None
    with handle:
        yield handle  # type: ignore[misc]


@contextmanager
def open_member_object(location: ArchiveLocation, name: str) -> Iterator[IO[bytes]]:
    """A streamed reader of `<base>/<name>`; FileNotFoundError naming the URL when it is not there."""
    from rlkeep.storage import ObjectMissing

    try:
        if location.base.startswith(HF_DATASET_PREFIX):
            with _hub_reader(location.base, name, location.revision) as reader:
                yield reader
        else:
            with _store_reader(location.base, name) as reader:
                yield reader
    except ObjectMissing:
        raise FileNotFoundError(join_url(location.base, name)) from None


def read_small_object(location: ArchiveLocation, name: str) -> bytes:
    """The whole of a small object (the MANIFEST)."""
    with open_member_object(location, name) as reader:
        return reader.read()
