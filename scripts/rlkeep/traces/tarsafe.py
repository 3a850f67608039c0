"""Tar safety: check every member of a trace tar before anything is written, extract it
safely, and the streaming primitives (member iteration, hashing, sized reads) the tar reader uses."""
from __future__ import annotations

import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hashing import HashingReader

HASH_CHUNK = 1 << 20
READ_CHUNK = 1 << 20  # tar members larger than this are read into one preallocated buffer


def member_path(name: str) -> PurePosixPath | None:
    """The member's path relative to the root, or None for the root entry itself ('.', './')."""
    path = PurePosixPath(name)
    parts = [part for part in path.parts if part != "."]
    return PurePosixPath(*parts) if parts else None


def unsafe_member_reason(member: tarfile.TarInfo) -> str | None:
    """Why this member must not be extracted, or None when it is a plain file or directory
    inside the root."""
    name = member.name
    if not name or "\x00" in name:
        return "empty or NUL in name"
    if name.startswith("/") or name.startswith("\\") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in PurePosixPath(name).parts or ".." in name.split("\\"):
        return "parent-directory ('..') component"
    if member.issym():
        return f"symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "FIFO"
    if not (member.isreg() or member.isdir()):
        return f"unsupported member type {member.type!r}"
    return None


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A member's bytes, read into one buffer of its size: in stream mode a single read() of a
    large member joins and slices its chunks, holding about three times the member at once."""
    handle = tar.extractfile(member)
    assert handle is not None
    if member.size <= READ_CHUNK:
        return handle.read()
    buffer = bytearray(member.size)
    view = memoryview(buffer)
    position = 0
    while position < member.size:
        count = handle.readinto(view[position:position + READ_CHUNK])
        if not count:
            raise RlkeepError(f"tar member {member.name!r} ends at byte {position} of {member.size}")
        position += count
    view.release()
    return buffer  # type: ignore[return-value]  # bytes-like: everything downstream only reads it


def iter_members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Members one at a time without TarFile keeping them all (it appends each to .members)."""
    while True:
        member = tar.next()
        if member is None:
            return
        tar.members.clear()
        yield member


def _check_tar(tar_path: Path) -> tuple[int, str]:
    """Check every member before anything is written; returns (member count, sha256 of the file)."""
    with open(tar_path, "rb") as raw:
        reader = HashingReader(raw)
        count = 0
        try:
            with tarfile.open(fileobj=reader, mode="r|*") as tar:
                for member in iter_members(tar):
                    reason = unsafe_member_reason(member)
                    if reason:
                        raise RlkeepError(f"{tar_path}: refusing the whole tar: member {member.name!r}: {reason}")
                    count += 1
        except tarfile.TarError as error:
            raise RlkeepError(f"{tar_path}: not a readable tar after {count} members: {error}") from error
        _, digest = reader.read_to_end(HASH_CHUNK)  # with the padding after the end-of-archive blocks
    return count, digest


def _extract_checked(tar_path: Path, dest: Path, select: Callable[[str], bool] | None) -> int:
    written = 0
    with tarfile.open(tar_path, mode="r:*") as tar:
        for member in iter_members(tar):
            rel = member_path(member.name)
            if rel is None:
                continue
            target = dest.joinpath(*rel.parts)
            try:
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if select is not None and not select(rel.as_posix()):
                    continue
                source = tar.extractfile(member)
                assert source is not None  # regular file, checked in _check_tar
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                with os.fdopen(fd, "wb") as handle, source:
                    shutil.copyfileobj(source, handle, HASH_CHUNK)
            except FileExistsError as error:
                raise RlkeepError(f"{tar_path}: refusing the whole tar: member {member.name!r} "
                                  "appears twice or collides with a directory") from error
            except NotADirectoryError as error:
                raise RlkeepError(f"{tar_path}: refusing the whole tar: member {member.name!r} "
                                  "lies under a path that is a file") from error
            written += 1
    return written


def extract_and_hash(tar_path: Path, dest: Path, select: Callable[[str], bool] | None) -> tuple[int, str]:
    tar_path, dest = Path(tar_path), Path(dest)
    if not tar_path.is_file():
        raise RlkeepError(f"{tar_path}: no such tar file")
    if dest.exists() and any(dest.iterdir()):
        raise RlkeepError(f"{dest}: extraction directory is not empty")
    _, sha256 = _check_tar(tar_path)
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _extract_checked(tar_path, dest, select), sha256
    except BaseException:
        # Nothing half-extracted is left behind: the caller gets a clean refusal.
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise


def safe_extract(tar_path: Path, dest: Path, *, select: Callable[[str], bool] | None = None) -> int:
    """Extract a trace tar into an empty `dest`; returns the number of files written.

    Every member is checked before anything is written: an absolute name, a `..` component,
    a symbolic or hard link, a device file or FIFO refuses the whole tar with an RlkeepError
    naming the member. Files are created fresh (mode 0644, no owners, no times), so a
    duplicate member also refuses the tar. `select(relative_path)` may skip files' contents
    (their directories are still created).
    """
    return extract_and_hash(tar_path, dest, select)[0]
