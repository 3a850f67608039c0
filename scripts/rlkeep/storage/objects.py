"""What a store holds and hands out: ObjectInfo, FetchedObject, the Store interface every store
implements, the read refusals (missing, denied, changed), key checking and the streaming hash.

Keys handed to callers are relative to the store root URL. Every read records size and sha256
while streaming; an ETag is never trusted as a content hash.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from rlkeep.errors import StoreError

CHUNK = 1 << 20


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root, '/'-separated, never absolute, never '..'
    size: int
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class FetchedObject:
    info: ObjectInfo
    body: IO[bytes] | None  # positioned at 0; None when the object vanished after listing or was denied
    sha256: str | None
    denied: "ObjectDenied | None" = None  # the store refused this read (HTTP 403)

    def read(self) -> bytes:
        assert self.body is not None
        return self.body.read()

    def close(self) -> None:
        if self.body is not None:
            self.body.close()


class Store(Protocol):
    url: str

    def url_of(self, key: str) -> str: ...
    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]: ...
    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]: ...
    def read_range(self, key: str, offset: int, length: int, sink: IO[bytes]) -> int: ...
    def read_bytes(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def put_file(self, key: str, path: Path) -> ObjectInfo: ...
    def put_bytes(self, key: str, data: bytes) -> ObjectInfo: ...
    def delete(self, keys: Iterable[str]) -> list[str]: ...


class ObjectMissing(StoreError):
    """The object was listed but is gone now."""


class ObjectDenied(StoreError):
    """The store refused to read or write this object (HTTP 403): a credential scoped to part of a prefix.

    identity: who the store says asked, where it says it (its error message, e.g. an ARN) and the
    access key id the request was signed with; never a secret or a signed URL."""

    def __init__(self, what: str, code: str, identity: str) -> None:
        super().__init__(f"{what}: access denied (HTTP 403 {code}); {identity}".rstrip("; "))
        self.code, self.identity = code, identity


class ObjectChanged(StoreError):
    """The object is not what the listing said (a re-read would not help)."""


def check_key(key: str, *, where: str) -> str:
    """Refuse keys that could escape a local tree (`..`, absolute, empty segments)."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreError(f"{where}: refusing object key {key!r}: expected a relative key without '\\', NUL or a leading '/'")
    segments = key.split("/")
    if any(segment in {"", ".", ".."} for segment in segments):
        raise StoreError(f"{where}: refusing object key {key!r}: '..', '.' or empty path segments could escape the tree")
    return key


def hash_stream(chunks: Iterable[bytes], sink: IO[bytes] | None) -> tuple[int, str]:
    """(size, sha256 hex) of the chunks, each also written to sink when there is one."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, digest.hexdigest()
