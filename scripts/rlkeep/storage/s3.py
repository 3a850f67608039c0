"""The `s3://bucket/prefix` store over boto3: listing, reads (presigned GETs on this thread's
keep-alive connection, or get_object), small writes and deletes; large uploads go through
rlkeep.storage.multipart. Every failure is classified by rlkeep.storage.failures."""
from __future__ import annotations

import base64
import errno
import hashlib
import io
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, BinaryIO, TypeVar
from urllib.parse import urlsplit

from rlkeep.errors import StoreError
from rlkeep.readable import plural
from rlkeep.storage import multipart
from rlkeep.storage.client import API_ATTEMPTS, requester_identity, s3_client
from rlkeep.storage.connection import connection_for
from rlkeep.storage.failures import (HttpStatusError, StoreThrottled, StoreUnavailable, cause_of, clock_problem_of, denied_by_store,
                                     describe_error, is_missing, world_error, is_retryable, is_throttle, retry_after_seconds,
                                     throttle_pause)
from rlkeep.storage.objects import CHUNK, ObjectChanged, ObjectDenied, ObjectInfo, ObjectMissing, check_key, hash_stream
from rlkeep.storage.signer import MethodNotOffered, query_signer
from rlkeep.urls import join_url

log = logging.getLogger(__name__)

READ_ATTEMPTS = 4  # whole-object re-reads when a body breaks mid-stream; whole re-sends of a small upload
T = TypeVar("T")


class S3Store:
    """The objects under s3://bucket/prefix; keys are relative to the prefix."""

    def __init__(self, url: str, bucket: str, prefix: str) -> None:
        self.url = url.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix

    def url_of(self, key: str) -> str:
        """The object's URL, for messages and evidence."""
        return join_url(self.url, key)

    def full_key(self, key: str) -> str:
        """The key in the bucket: the checked relative key under the prefix."""
        check_key(key, where=self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def call(self, what: str, action: Callable[[], object]) -> object:
        """One API call; botocore already retried throttling, 5xx and connection errors."""
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - classified below
            clock = clock_problem_of(error)
            if clock is not None:
                raise StoreError(f"{what}: {clock}") from None
            world = world_error(error, self.url, what)
            if world is not None:
                raise world from None
            if is_missing(error):
                raise ObjectMissing(f"{what}: no such object") from None
            throttled = cause_of(error, StoreThrottled)
            if throttled is not None:
                raise StoreThrottled(f"{what}: {throttled}") from None
            if is_retryable(error):
                raise StoreUnavailable(f"{what}: failed after {plural(API_ATTEMPTS, 'attempt')}: {describe_error(error)}") from None
            raise StoreError(f"{what}: failed after 1 attempts: {describe_error(error)}") from None

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
            page = self.call(
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
        full = self.full_key(key)
        what = self.url_of(key)

        def read() -> tuple[int, str]:
            size, expected, digest = self._get(full, sink)
            if expected >= 0 and size != expected:
                raise StoreError(f"{what}: body ended after {size} of {expected} bytes")
            return size, digest

        return self._read_attempts(what, sink, read)

    def read_range(self, key: str, offset: int, length: int, sink: IO[bytes]) -> int:
        """Stream `length` bytes of one object from `offset` into sink (a rewindable sink, as read_into's)."""
        full = self.full_key(key)
        what = f"{self.url_of(key)} (bytes {offset}..{offset + length})"

        def read() -> int:
            size = self._get(full, sink, (offset, length))[0] if length else 0
            if size != length:
                raise StoreError(f"{what}: body ended after {size} of {length} bytes")
            return size

        return self._read_attempts(what, sink, read)

    def _read_attempts(self, what: str, sink: IO[bytes], read: Callable[[], T]) -> T:
        """read() into sink under _attempts, the sink rewound to where it stood after each failed
        attempt; an object gone since it was listed says so."""
        start = sink.tell()

        def rewind() -> None:
            sink.seek(start)
            sink.truncate()

        try:
            return self._attempts(what, "read", read, rewind)
        except ObjectMissing:
            raise ObjectMissing(f"{what}: listed but no longer exists") from None

    def _attempts(self, what: str, verb: str, action: Callable[[], T], rewind: Callable[[], None]) -> T:
        """action() on rlkeep's own connection (botocore's retries do not apply), attempted again when
        another attempt may cure the failure (a broken connection, a 5xx) and after SlowDown (waited
        out within its bound, not counted as an attempt); rewind() after every failed attempt."""
        attempt, throttles, throttled_wait = 0, 0, 0.0
        while attempt < READ_ATTEMPTS:
            try:
                return action()
            except (ObjectMissing, ObjectChanged):
                rewind()
                raise
            except Exception as error:  # noqa: BLE001
                rewind()
                if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise  # the local disk is full: no retry helps; the step names the full path
                if is_missing(error):
                    raise ObjectMissing(f"{what}: no such object") from None
                clock = clock_problem_of(error)
                if clock is not None:
                    raise StoreError(f"{what}: {clock}") from None
                if isinstance(error, HttpStatusError) and is_throttle(error.status, error.code):
                    throttles += 1
                    pause = throttle_pause(waited=throttled_wait, attempt=throttles, what=f"{what}: {verb}",
                                           retry_after=retry_after_seconds(error.headers.get("Retry-After")))
                    throttled_wait += pause
                    time.sleep(pause)
                    continue
                denied = denied_by_store(error)
                if denied is not None:
                    raise ObjectDenied(what, denied[0], requester_identity(s3_client(), denied[1])) from None
                transient = isinstance(error, StoreError) or is_retryable(error)
                if not transient or attempt == READ_ATTEMPTS - 1:
                    failure = StoreUnavailable if transient else StoreError
                    raise failure(f"{what}: {verb} failed after {plural(attempt + 1, 'attempt')}: {describe_error(error)}") from None
                time.sleep(min(8.0, 0.2 * 2**attempt))
                attempt += 1
        raise AssertionError("unreachable")

    def _get(self, full_key: str, sink: IO[bytes], byte_range: tuple[int, int] | None = None) -> tuple[int, int, str]:
        """GET one object (or the byte_range (offset, length) of it) into sink: (bytes read, Content-Length, sha256).

        The default path presigns the request (the signature in the query, as botocore would
        presign it: rlkeep.storage.signer) and sends it on this thread's keep-alive connection
        (rlkeep.storage.connection): a fraction of get_object's client CPU, which dominates when syncing many
        small objects. RLKEEP_S3_PRESIGNED_GET=0 falls back to get_object (e.g. behind a proxy).
        """
        if os.environ.get("RLKEEP_S3_PRESIGNED_GET", "1") == "0":
            ranged = {"Range": f"bytes={byte_range[0]}-{byte_range[0] + byte_range[1] - 1}"} if byte_range else {}
            response = s3_client().get_object(Bucket=self.bucket, Key=full_key, **ranged)
            try:
                size, digest = hash_stream(response["Body"].iter_chunks(CHUNK), sink)
            except BaseException:
                response["Body"].close()  # an unread body must not return to the pool
                raise
            return size, int(response.get("ContentLength", -1)), digest
        client = s3_client()
        signer = query_signer(client, self.bucket)
        if signer is not None:
            return connection_for(signer.scheme, signer.host).get(signer.target(full_key), sink, byte_range)
        parts = urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": full_key},
                                                       ExpiresIn=900))
        return connection_for(parts.scheme, parts.netloc).get(f"{parts.path}?{parts.query}", sink, byte_range)

    def put_open_file(self, key: str, body: BinaryIO) -> None:
        """One PUT of an open file (below multipart.MULTIPART_BYTES), sent whole on each attempt.

        As with reads, the default path presigns the request (rlkeep.storage.signer, where botocore's
        own presigned PUT was reproduced) and sends it on this thread's keep-alive connection, with
        its Content-MD5 signed so the store checks what arrived: put_object's client CPU was most of
        the time of uploading many small files. RLKEEP_S3_PRESIGNED_PUT=0 uses put_object, and so does
        every later upload to a store that refused a presigned PUT's signature (S3-compatible stores
        differ there: moto, for one, looks for the Content-MD5 header under another spelling).
        """
        full, what = self.full_key(key), self.url_of(key)
        client = s3_client()
        signer = query_signer(client, self.bucket)

        def put_object() -> object:
            body.seek(0)
            return client.put_object(Bucket=self.bucket, Key=full, Body=body)

        if signer is None or "PUT" not in signer.methods or os.environ.get("RLKEEP_S3_PRESIGNED_PUT", "1") == "0":
            self.call(f"{what}: upload", put_object)
            return

        def put() -> bool:
            """False, sending nothing, once the store refused presigned PUTs (another thread may find out)."""
            body.seek(0)
            md5, length = hashlib.md5(usedforsecurity=False), 0
            for chunk in iter(lambda: body.read(CHUNK), b""):
                md5.update(chunk)
                length += len(chunk)
            content_md5 = base64.b64encode(md5.digest()).decode()
            try:
                target = signer.target(full, "PUT", content_md5)
            except MethodNotOffered:
                return False
            connection_for(signer.scheme, signer.host).put(target, body, length, content_md5)
            return True

        try:
            sent = self._attempts(what, "upload", put, lambda: None)
        except ObjectDenied as denied:
            if denied.code != "SignatureDoesNotMatch":
                raise
            if signer.refuse_puts():
                log.warning("%s: the store refused a presigned PUT's signature; uploading with put_object "
                            "from now on", self.url)
            sent = False
        if not sent:
            self.call(f"{what}: upload", put_object)

    def read_bytes(self, key: str) -> bytes:
        buffer = io.BytesIO()
        self.read_into(key, buffer)
        return buffer.getvalue()

    def exists(self, key: str) -> bool:
        try:
            self.call(self.url_of(key), lambda: s3_client().head_object(Bucket=self.bucket, Key=self.full_key(key)))
            return True
        except ObjectMissing:
            return False

    def head(self, key: str) -> ObjectInfo:
        response = self.call(self.url_of(key), lambda: s3_client().head_object(Bucket=self.bucket, Key=self.full_key(key)))
        return ObjectInfo(key=key, size=int(response["ContentLength"]), etag=response.get("ETag", "").strip('"'))  # type: ignore[index]

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        """Upload one file (in parts above multipart.MULTIPART_BYTES)."""
        return multipart.put_file(self, key, path)

    def unfinished_uploads(self, key: str) -> list[str]:
        """Upload ids of multipart uploads in progress for exactly this key (no other key's)."""
        return multipart.unfinished_uploads(self, key)

    def abort_unfinished_uploads(self, key: str) -> int:
        """Abort this key's multipart uploads in progress; best effort (rlkeep.storage.multipart)."""
        return multipart.abort_unfinished_uploads(self, key)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        self.put_open_file(key, io.BytesIO(data))
        return ObjectInfo(key=key, size=len(data))

    def delete(self, keys: Iterable[str]) -> list[str]:
        deleted: list[str] = []
        batch: list[str] = []

        def flush() -> None:
            if not batch:
                return
            objects = [{"Key": self.full_key(key)} for key in batch]
            response = self.call(
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
