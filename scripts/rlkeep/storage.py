"""Object store access: `s3://bucket/prefix` over boto3 and `file:///path`, behind one interface.

Configuration comes from the standard boto3 sources only (docs/reference.md, contract §2):
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, and
AWS_CONFIG_FILE (e.g. `s3 = addressing_style = virtual` for CoreWeave). Checksums are sent
only when required, which Cloudflare R2 and other S3 clones need (boto/boto3#4392).

Keys handed to callers are relative to the store root URL. Every read records size and
sha256 while streaming; an ETag is never trusted as a content hash.
"""
from __future__ import annotations

import hashlib
import io
import errno
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol
from urllib.parse import urlparse

from rlkeep.errors import StoreError

CHUNK = 1 << 20
API_ATTEMPTS = 5  # botocore's own retries (standard mode: throttling, 5xx, resets), with backoff
READ_ATTEMPTS = 4  # whole-object re-reads when a body breaks mid-stream


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root, '/'-separated, never absolute, never '..'
    size: int
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class FetchedObject:
    info: ObjectInfo
    body: IO[bytes] | None  # positioned at 0; None when the object vanished after listing
    sha256: str | None

    def read(self) -> bytes:
        assert self.body is not None
        return self.body.read()

    def close(self) -> None:
        if self.body is not None:
            self.body.close()


class Store(Protocol):
    url: str

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]: ...
    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]: ...
    def read_bytes(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def put_file(self, key: str, path: Path) -> ObjectInfo: ...
    def put_bytes(self, key: str, data: bytes) -> ObjectInfo: ...
    def delete(self, keys: Iterable[str]) -> list[str]: ...


class ObjectMissing(StoreError):
    """The object was listed but is gone now."""


class ObjectChanged(StoreError):
    """The object is not what the listing said (a re-read would not help)."""


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


def check_key(key: str, *, where: str) -> str:
    """Refuse keys that could escape a local tree (`..`, absolute, empty segments)."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreError(f"{where}: refusing object key {key!r}: expected a relative key without '\\', NUL or a leading '/'")
    segments = key.split("/")
    if any(segment in {"", ".", ".."} for segment in segments):
        raise StoreError(f"{where}: refusing object key {key!r}: '..', '.' or empty path segments could escape the tree")
    return key


def open_store(url: str) -> Store:
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreError(f"{url}: expected s3://bucket/prefix")
        return S3Store(url, parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in {"", "localhost"} or not parsed.path.startswith("/"):
            raise StoreError(f"{url}: expected file:///absolute/path")
        return FileStore(url, Path(parsed.path))
    raise StoreError(f"{url}: unsupported store URL; expected s3://bucket/prefix or file:///absolute/path")


def _hash_stream(chunks: Iterable[bytes], sink: IO[bytes] | None) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, digest.hexdigest()


# --------------------------------------------------------------------------- file://


class FileStore:
    def __init__(self, url: str, root: Path) -> None:
        self.url = url.rstrip("/")
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, where=self.url)

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]:
        base = self.root / prefix.strip("/") if prefix.strip("/") else self.root
        if not base.exists():
            return
        if not base.is_dir():
            raise StoreError(f"{self.url}/{prefix}: expected a directory")
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames.sort()
            for name in filenames:
                path = Path(dirpath) / name
                if path.is_symlink():
                    continue
                stat = path.stat()
                key = path.relative_to(self.root).as_posix()
                found.append(ObjectInfo(key=key, size=stat.st_size, last_modified=str(int(stat.st_mtime))))
        yield from sorted(found, key=lambda info: info.key.encode("utf-8"))

    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]:
        try:
            with open(self._path(key), "rb") as handle:
                return _hash_stream(iter(lambda: handle.read(CHUNK), b""), sink)
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{key}: listed but no longer exists") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{key}: no such object") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)
        return ObjectInfo(key=key, size=target.stat().st_size)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return ObjectInfo(key=key, size=len(data))

    def delete(self, keys: Iterable[str]) -> list[str]:
        deleted = []
        for key in keys:
            path = self._path(key)
            if path.is_file():
                path.unlink()
                deleted.append(key)
        return deleted


# --------------------------------------------------------------------------- s3://


_clients: dict[str | None, object] = {}
_clients_lock = threading.Lock()


def s3_client():  # type: ignore[no-untyped-def]
    """One boto3 client per endpoint for the whole process: clients are thread-safe, and each
    costs tens of MB and noticeable CPU to build (a client per thread multiplies both)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    client = _clients.get(endpoint)
    if client is not None:
        return client
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"max_attempts": API_ATTEMPTS, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=64,
            )
            session = boto3.session.Session(botocore_session=_botocore_session())
            region = session.region_name or os.environ.get("AWS_REGION") or "us-east-1"
            client = session.client("s3", region_name=region, config=config)
            _clients[endpoint] = client
    return client


def _timestamp(value: str):  # type: ignore[no-untyped-def]
    """ISO 8601 timestamps (every listing entry has one) without dateutil's tokenizer, which costs
    a quarter of a millisecond per object; any other form goes to botocore's own parser."""
    from datetime import datetime

    from botocore.utils import parse_timestamp

    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return parse_timestamp(value)
    return parsed if parsed.tzinfo is not None else parse_timestamp(value)


def _botocore_session():  # type: ignore[no-untyped-def]
    import botocore.session

    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
    return core


class HttpStatusError(Exception):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"HTTP {status} {code}".rstrip())
        self.status = status


def _error_code(body: bytes) -> str:
    start, end = body.find(b"<Code>"), body.find(b"</Code>")
    return body[start + 6:end].decode("utf-8", "replace") if 0 <= start < end else ""


_pool = None


def _http_pool():  # type: ignore[no-untyped-def]
    global _pool
    if _pool is None:
        with _clients_lock:
            if _pool is None:
                import certifi
                import urllib3

                _pool = urllib3.PoolManager(
                    maxsize=64, block=False, retries=False,
                    timeout=urllib3.Timeout(connect=10, read=60),
                    ca_certs=os.environ.get("AWS_CA_BUNDLE") or certifi.where(),
                )
    return _pool


def _retryable(error: Exception) -> bool:
    from botocore.exceptions import (
        ClientError,
        ConnectionError as BotoConnectionError,
        HTTPClientError,
        IncompleteReadError,
        ResponseStreamingError,
    )
    from urllib3.exceptions import ProtocolError

    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = error.response.get("Error", {}).get("Code", "")
        return status >= 500 or code in {"SlowDown", "Throttling", "RequestTimeout", "InternalError"}
    if isinstance(error, HttpStatusError):
        return error.status >= 500 or error.status in {408, 429}
    return isinstance(error, (Urllib3Error, BotoConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError, ProtocolError, OSError))


def _is_missing(error: Exception) -> bool:
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in {"NoSuchKey", "404", "NotFound"} or status == 404
    return False


def _describe_error(error: Exception) -> str:
    text = str(error)
    return text if len(text) < 300 else text[:300] + "..."


class S3Store:
    def __init__(self, url: str, bucket: str, prefix: str) -> None:
        self.url = url.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix

    def _full(self, key: str) -> str:
        check_key(key, where=self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, what: str, action: Callable[[], object]) -> object:
        """One API call; botocore already retried throttling, 5xx and connection errors."""
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - classified below
            if _is_missing(error):
                raise ObjectMissing(f"{what}: no such object") from None
            attempts = API_ATTEMPTS if _retryable(error) else 1
            raise StoreError(f"{what}: failed after {attempts} attempts: {_describe_error(error)}") from None

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]:
        full_prefix = "/".join(p for p in (self.prefix, prefix.strip("/")) if p)
        if full_prefix:
            full_prefix += "/"
        root_len = len(self.prefix) + 1 if self.prefix else 0
        token: str | None = None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": full_prefix, "MaxKeys": page_size}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(
                f"{self.url}: listing {prefix or '/'}",
                lambda: s3_client().list_objects_v2(**kwargs),
            )
            for entry in page.get("Contents", []):  # type: ignore[union-attr]
                key = entry["Key"][root_len:]
                if key.endswith("/") and entry["Size"] == 0:
                    continue  # a "folder" marker some tools create
                check_key(key, where=f"{self.url} listing")
                yield ObjectInfo(
                    key=key,
                    size=int(entry["Size"]),
                    etag=entry.get("ETag", "").strip('"') or None,
                    last_modified=entry["LastModified"].isoformat() if entry.get("LastModified") else None,
                )
            if not page.get("IsTruncated"):  # type: ignore[union-attr]
                return
            token = page["NextContinuationToken"]  # type: ignore[index]

    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]:
        """Stream one object into sink; a broken body restarts from the beginning.

        The sink must be rewindable (seek/truncate) for a retry to be clean: callers pass a
        BytesIO or a temp file, never a half-written tar.
        """
        full = self._full(key)
        what = f"{self.url}/{key}"
        for attempt in range(READ_ATTEMPTS):
            start = sink.tell()
            try:
                size, expected, digest = self._get(full, sink)
                if expected >= 0 and size != expected:
                    raise StoreError(f"{what}: body ended after {size} of {expected} bytes")
                return size, digest
            except ObjectMissing:
                raise ObjectMissing(f"{what}: listed but no longer exists") from None
            except ObjectChanged:
                sink.seek(start)
                sink.truncate()
                raise
            except Exception as error:  # noqa: BLE001
                sink.seek(start)
                sink.truncate()
                if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise  # the local disk is full: no retry helps; the step names the full path
                if _is_missing(error):
                    raise ObjectMissing(f"{what}: listed but no longer exists") from None
                transient = isinstance(error, StoreError) or _retryable(error)
                if not transient or attempt == READ_ATTEMPTS - 1:
                    raise StoreError(f"{what}: read failed after {attempt + 1} attempts: {_describe_error(error)}") from None
                time.sleep(min(8.0, 0.2 * 2**attempt))
        raise AssertionError("unreachable")

    def _get(self, full_key: str, sink: IO[bytes]) -> tuple[int, int, str]:
        """GET one object into sink: (bytes read, Content-Length, sha256).

        The default path presigns the request with botocore and streams it with urllib3:
        about half the client CPU of get_object, which dominates when syncing many small
        objects. RLKEEP_S3_PRESIGNED_GET=0 falls back to get_object (e.g. behind a proxy).
        """
        if os.environ.get("RLKEEP_S3_PRESIGNED_GET", "1") == "0":
            response = s3_client().get_object(Bucket=self.bucket, Key=full_key)
            try:
                size, digest = _hash_stream(response["Body"].iter_chunks(CHUNK), sink)
            except BaseException:
                response["Body"].close()  # an unread body must not return to the pool
                raise
            return size, int(response.get("ContentLength", -1)), digest
        url = s3_client().generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": full_key},
                                                 ExpiresIn=900)
        response = _http_pool().request("GET", url, preload_content=False, decode_content=False, redirect=False)
        try:
            if response.status == 404:
                raise ObjectMissing(full_key)
            if response.status != 200:
                raise HttpStatusError(response.status, _error_code(response.read(4096)))
            expected = int(response.headers.get("Content-Length", -1))
            size, digest = _hash_stream(response.stream(CHUNK, decode_content=False), sink)
            return size, expected, digest
        except BaseException:
            response.close()  # a body left unread must not go back to the pool with its connection
            raise
        finally:
            response.release_conn()

    def read_bytes(self, key: str) -> bytes:
        import io

        buffer = io.BytesIO()
        self.read_into(key, buffer)
        return buffer.getvalue()

    def exists(self, key: str) -> bool:
        try:
            self._call(f"{self.url}/{key}", lambda: s3_client().head_object(Bucket=self.bucket, Key=self._full(key)))
            return True
        except ObjectMissing:
            return False

    def head(self, key: str) -> ObjectInfo:
        response = self._call(f"{self.url}/{key}", lambda: s3_client().head_object(Bucket=self.bucket, Key=self._full(key)))
        return ObjectInfo(key=key, size=int(response["ContentLength"]), etag=response.get("ETag", "").strip('"'))  # type: ignore[index]

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=4)
        self._call(
            f"{self.url}/{key}: upload",
            lambda: s3_client().upload_file(str(path), self.bucket, self._full(key), Config=config),
        )
        return self.head(key)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        self._call(
            f"{self.url}/{key}: upload",
            lambda: s3_client().put_object(Bucket=self.bucket, Key=self._full(key), Body=data),
        )
        return ObjectInfo(key=key, size=len(data))

    def delete(self, keys: Iterable[str]) -> list[str]:
        deleted: list[str] = []
        batch: list[str] = []

        def flush() -> None:
            if not batch:
                return
            objects = [{"Key": self._full(key)} for key in batch]
            response = self._call(
                f"{self.url}: delete {len(batch)} objects",
                lambda: s3_client().delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": False}),
            )
            errors = response.get("Errors", [])  # type: ignore[union-attr]
            if errors:
                first = errors[0]
                raise StoreError(f"{self.url}: delete refused for {len(errors)} objects, e.g. {first.get('Key')}: {first.get('Code')}")
            deleted.extend(batch)
            batch.clear()

        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                flush()
        flush()
        return deleted


def bucket_location(url: str) -> tuple[str | None, str]:
    """(region, how it was found) of an s3:// URL's bucket, asked of the store (GetBucketLocation).

    An empty answer is not read as us-east-1 (AWS's convention) because other S3 servers, e.g.
    SeaweedFS, answer empty too: the region is then unknown, and the text says why.
    """
    store = open_store(url)
    if not isinstance(store, S3Store):
        return None, f"{url}: not an s3:// store, it has no bucket location"
    try:
        response = s3_client().get_bucket_location(Bucket=store.bucket)
    except Exception as error:  # noqa: BLE001 - any refusal leaves the region unknown, with the reason
        return None, f"GetBucketLocation of bucket {store.bucket} failed: {_describe_error(error)}"
    region = response.get("LocationConstraint")
    if not isinstance(region, str) or not region.strip():
        return None, f"GetBucketLocation of bucket {store.bucket} answered empty"
    return region.strip(), f"GetBucketLocation of bucket {store.bucket}"


# --------------------------------------------------------------------------- bulk reads


BATCH_OBJECTS = 16  # small objects fetched back to back by one worker: one hand-off per batch
BATCH_BYTES = 1 << 20


def _batches(infos: Iterable[ObjectInfo]) -> Iterator[list[ObjectInfo]]:
    """Consecutive runs of small objects (up to BATCH_OBJECTS and BATCH_BYTES); large objects alone."""
    batch: list[ObjectInfo] = []
    size = 0
    for info in infos:
        if batch and (len(batch) == BATCH_OBJECTS or size + info.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(info)
        size += info.size
    if batch:
        yield batch


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
    import tempfile

    def fetch(info: ObjectInfo) -> FetchedObject:
        body: IO[bytes]
        if info.size <= spill_bytes:
            body = _CappedBuffer(info.size, f"{store.url}/{info.key}")
        else:
            body = tempfile.SpooledTemporaryFile(max_size=spill_bytes)  # type: ignore[assignment]
        try:
            size, digest = store.read_into(info.key, body)
        except ObjectMissing:
            body.close()
            return FetchedObject(info, None, None)
        except BaseException:
            body.close()
            raise
        if size != info.size:
            body.close()
            raise StoreError(f"{store.url}/{info.key}: listed with {info.size} bytes but read {size}; the object changed during sync")
        body.seek(0)
        return FetchedObject(info, body, digest)

    def fetch_batch(batch: list[ObjectInfo]) -> list[FetchedObject]:
        done: list[FetchedObject] = []
        try:
            for info in batch:
                done.append(fetch(info))
        except BaseException:
            for fetched in done:
                fetched.close()
            raise
        return done

    pending: deque[tuple[int, Future[list[FetchedObject]]]] = deque()
    inflight = 0
    source = _batches(infos)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
        try:
            exhausted = False
            while True:
                while not exhausted and len(pending) < workers * 2 and (inflight < max_inflight_bytes or not pending):
                    batch = next(source, None)
                    if batch is None:
                        exhausted = True
                        break
                    size = sum(info.size for info in batch)
                    pending.append((size, pool.submit(fetch_batch, batch)))
                    inflight += size
                if not pending:
                    return
                size, future = pending.popleft()
                results = future.result()
                inflight -= size
                for index, result in enumerate(results):
                    try:
                        yield result
                    except BaseException:  # the consumer stopped: close what it will never see
                        for later in results[index + 1:]:
                            later.close()
                        raise
        finally:
            for _, future in pending:
                if not future.cancel() and future.done() and future.exception() is None:
                    for fetched in future.result():
                        fetched.close()


def upload_tree(root: Path, store: Store, *, workers: int = 16) -> int:
    """Copy every file under root to the store under the same relative keys; returns the count."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda path: store.put_file(path.relative_to(root).as_posix(), path), files))
    return len(files)
