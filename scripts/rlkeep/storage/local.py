"""The `file:///path` store: a local directory behind the Store interface (tests, demos, and runs
kept on a shared filesystem). Writes land under a temporary name and are renamed into place."""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from rlkeep.errors import StoreError
from rlkeep.storage.objects import CHUNK, ObjectInfo, ObjectMissing, check_key, hash_stream
from rlkeep.urls import join_url


class FileStore:
    """The objects are the files under root; keys are their paths relative to it."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url.rstrip("/")
        self.root = root

    def url_of(self, key: str) -> str:
        """The object's URL, for messages and evidence."""
        return join_url(self.url, key)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, where=self.url)

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]:
        base = self.root / prefix.strip("/") if prefix.strip("/") else self.root
        if not base.exists():
            return
        if not base.is_dir():
            raise StoreError(f"{self.url_of(prefix)}: expected a directory")
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
                return hash_stream(iter(lambda: handle.read(CHUNK), b""), sink)
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url_of(key)}: listed but no longer exists") from None

    def read_range(self, key: str, offset: int, length: int, sink: IO[bytes]) -> int:
        try:
            with open(self._path(key), "rb") as handle:
                handle.seek(offset)
                left = length
                while left:
                    chunk = handle.read(min(CHUNK, left))
                    if not chunk:
                        raise StoreError(f"{self.url_of(key)}: ends before byte {offset + length}")
                    sink.write(chunk)
                    left -= len(chunk)
                return length
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url_of(key)}: listed but no longer exists") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url_of(key)}: no such object") from None

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
