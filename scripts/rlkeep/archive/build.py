"""Build the archive: one deterministic `.tgz` of everything informative, plus its MANIFEST.

Members are streamed from the source tars straight into the output (random access into the
plain tar, no extraction to disk) in sorted order with fixed metadata, and compressed by
zlib-ng in fixed blocks across the cores (see `_gzip_writer`): the gzip header carries no time
and no file name, so the same inputs give the same bytes. A source may come with
a rewriter (the redaction): a member it names is rewritten on its way in, into one temp file at a
time, so the disk never holds a second copy of a source tree. The MANIFEST is
also the archive's first member, so the tarball describes itself when found alone.
"""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from zlib_ng import gzip_ng_threaded

from rlkeep.archive.manifest import (
    DEFAULT_LARGE_THRESHOLD,
    MANIFEST_MEMBER,
    ManifestEntry,
    archive_rule,
    manifest_text,
)
from rlkeep.diskspace import TAR_OVERHEAD_PER_MEMBER, require_free
from rlkeep.errors import RlkeepError
from rlkeep.hashing import HashingReader
from rlkeep.jsonio import atomic_write_bytes
from rlkeep.tarstream import HashingWriter, member_header, tar_member

TREE_NAMES = ("logs", "trace_jobs", "eval_jobs", "rlkeep")  # eval_jobs: eval runs (rlkeep.kinds)
GZIP_LEVEL = 6  # level 9 costs ~3x the CPU for a few percent on text-heavy trees
# Block i is deflated (primed with block i-1's last 32 KiB) by compressor i % GZIP_THREADS, and a
# zlib-ng compressor carries state from one block to its next: the bytes depend on the block size
# and on the thread count, so both are fixed here, never taken from the machine. Two blocks in
# flight per thread bound memory.
GZIP_BLOCK = 1 << 20
GZIP_THREADS = 2


# --------------------------------------------------------------------------- sources


class MemberRewriter(Protocol):
    """Rewrites some members of one source tar (rlkeep.redaction.walk.TarRedaction): which ones,
    it learns from a scan of each member's bytes in the digest pass."""

    def scan_member(self, body: IO[bytes], member: str, size: int) -> None: ...  # reads front to back

    def is_dirty(self, member: str) -> bool: ...  # once the member was scanned

    def redacted(self, body: IO[bytes], member: str, size: int) -> IO[bytes]: ...  # a temp file at its start


@dataclass(frozen=True)
class Planned:
    entry: ManifestEntry
    tar_index: int | None  # which source tar, or None for a job file
    tarinfo: tarfile.TarInfo | None
    path: Path | None


def _check_member_name(name: str, where: str) -> str:
    clean = name.removeprefix("./")
    if (not clean or clean.startswith("/") or "\x00" in clean or "\\" in clean
            or any(part in {"", ".", ".."} for part in clean.rstrip("/").split("/"))):
        raise RlkeepError(f"{where}: member {name!r} has an unsafe name ('..', absolute or empty segments); "
                          "refusing to archive it")
    return clean


def _plan_tar(tree: str, tar: tarfile.TarFile, index: int, tar_path: Path, large_threshold: int) -> Iterator[Planned]:
    seen: set[str] = set()
    try:
        members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise RlkeepError(f"{tar_path}: not a readable tar ({error})") from None
    for info in members:
        if info.isdir():
            continue  # folders are implied by their files
        name = _check_member_name(info.name, str(tar_path))
        if name in seen:
            raise RlkeepError(f"{tar_path}: member {name!r} appears twice; expected each object once (sync writes it once)")
        seen.add(name)
        member = f"{tree}/{name}"
        if not info.isfile():
            yield Planned(ManifestEntry(member, 0, "not_a_regular_file"), None, None, None)
            continue
        reason = archive_rule(member, info.size, large_threshold=large_threshold)
        yield Planned(ManifestEntry(member, info.size, reason), index if reason is None else None,
                      info if reason is None else None, None)


def _plan_files(extra_files: list[tuple[str, Path]], large_threshold: int) -> Iterator[Planned]:
    for name, path in extra_files:
        member = f"rlkeep/{_check_member_name(name, f'extra file {path}')}"
        path = Path(path)
        if not path.is_file():
            raise RlkeepError(f"{path}: job file for archive member {member} does not exist or is not a regular file")
        size = path.stat().st_size
        reason = archive_rule(member, size, large_threshold=large_threshold)
        yield Planned(ManifestEntry(member, size, reason), None, None, path if reason is None else None)


def job_files(job_dir: Path, record_path: Path) -> list[tuple[str, Path]]:
    """The job's small files for `extra_files`: metrics/, chain.json, retries.json, sync manifests, record.

    Member names are relative to the archive's `rlkeep/` folder. Missing required files raise.
    """
    job_dir, record_path = Path(job_dir), Path(record_path)
    files: list[tuple[str, Path]] = []
    for name in ("chain.json", "retries.json", "sync/logs.manifest.json", "sync/trace_jobs.manifest.json"):
        path = job_dir / name
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; the archive needs it (run the capture and sync steps first)")
        files.append((name, path))
    metrics = job_dir / "metrics"
    if not metrics.is_dir():
        raise RlkeepError(f"{metrics}: missing; the archive needs the metric surface (run the metrics step first)")
    for path in sorted(metrics.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            files.append((f"metrics/{path.relative_to(metrics).as_posix()}", path))
    if not record_path.is_file():
        raise RlkeepError(f"{record_path}: job record missing")
    files.append((f"records/{record_path.name}", record_path))
    return files


# --------------------------------------------------------------------------- writing


class _ExactReader:
    """Reads a job file and fails if it is not exactly the planned size (it changed meanwhile)."""

    def __init__(self, handle: IO[bytes], size: int, where: str) -> None:
        self.handle, self.left, self.where = handle, size, where

    def read(self, n: int = -1) -> bytes:
        data = self.handle.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        if not data and self.left > 0:
            raise RlkeepError(f"{self.where}: shrank while being archived; rerun the archive step")
        return data


class _MemberAt:
    """A tar member's bytes, read at their offset in the tar file: each read seeks first, so readers
    of one file may interleave; a tar that ends before them is the tar's error, as tarfile says it."""

    def __init__(self, handle: IO[bytes], offset: int, size: int) -> None:
        self.handle, self.position, self.left = handle, offset, size

    def read(self, n: int = -1) -> bytes:
        self.handle.seek(self.position)
        data = self.handle.read(self.left if n < 0 else min(n, self.left))
        if not data and self.left:
            raise tarfile.ReadError("unexpected end of data")
        self.position += len(data)
        self.left -= len(data)
        return data

    def __enter__(self) -> "_MemberAt":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _check_trees(trees: list[str]) -> None:
    for tree in trees:
        if tree not in TREE_NAMES or tree == "rlkeep":
            raise RlkeepError(f"archive source tree {tree!r}: expected one of logs, trace_jobs, eval_jobs")
    if len(set(trees)) != len(trees):
        raise RlkeepError(f"archive sources name a tree twice ({trees}); expected each sync tar once")


def _open_and_plan(stack: ExitStack, sources: list[tuple[str, Path]], extra_files: list[tuple[str, Path]],
                   large_threshold: int, rewriters: dict[int, MemberRewriter]
                   ) -> tuple[list[tarfile.TarFile], list[Planned]]:
    """The open source tars and every member planned (kept or skipped), sorted by member name."""
    tars: list[tarfile.TarFile] = []
    planned: list[Planned] = []
    for index, (tree, tar_path) in enumerate(sources):
        tar_path = Path(tar_path)
        if not tar_path.is_file():
            raise RlkeepError(f"{tar_path}: sync tar for archive tree {tree}/ does not exist")
        try:
            tar = stack.enter_context(tarfile.open(tar_path, "r:*"))
        except (tarfile.TarError, OSError) as error:
            raise RlkeepError(f"{tar_path}: not a readable tar ({error})") from None
        tars.append(tar)
        planned.extend(_plan_tar(tree, tar, index, tar_path, large_threshold))
    planned.extend(_plan_files(extra_files, large_threshold))
    planned.sort(key=lambda p: p.entry.member.encode("utf-8"))
    names = [p.entry.member for p in planned]
    duplicate = next((a for a, b in zip(names, names[1:]) if a == b), None)
    if duplicate is not None:
        raise RlkeepError(f"archive: member {duplicate!r} would be written twice; check extra_files names")
    return tars, [_with_digest(item, tars, sources, rewriters, large_threshold) for item in planned]


def _with_digest(item: Planned, tars: list[tarfile.TarFile], sources: list[tuple[str, Path]],
                 rewriters: dict[int, MemberRewriter], large_threshold: int) -> Planned:
    """The planned member with the size and sha256 of its bytes (rewritten, if its source's
    rewriter names it) in the MANIFEST line.

    The MANIFEST is the archive's first member, so its digests are taken in a reading pass before
    the archive is written (the sources are local files, just written by the sync). A source's
    rewriter scans each member in the same read; only a member it will rewrite is read again.
    """
    if item.entry.reason is not None:
        return item
    rewriter = None if item.tar_index is None else rewriters.get(item.tar_index)
    digested = False
    if rewriter is not None and item.tarinfo is not None:
        with _source_body(item, tars, sources) as body:
            reading = HashingReader(body)
            rewriter.scan_member(reading, item.tarinfo.name, item.tarinfo.size)
            size, digest = reading.read_to_end()
        digested = not rewriter.is_dirty(item.tarinfo.name)  # else its digest is the rewritten bytes'
    if not digested:
        with _member_body(item, tars, sources, rewriters) as body:
            size, digest = HashingReader(body).read_to_end()
    entry = replace(item.entry, size=size, sha256=digest)
    if size != item.entry.size:  # rewritten: the rule sees the size that is archived
        reason = archive_rule(entry.member, size, large_threshold=large_threshold)
        if reason is not None:
            return Planned(replace(entry, reason=reason, sha256=None), None, None, None)
    return replace(item, entry=entry)


@contextmanager
def _source_body(item: Planned, tars: list[tarfile.TarFile], sources: list[tuple[str, Path]]) -> Iterator[IO[bytes]]:
    """A reader of a source tar member's bytes as the tar holds them."""
    assert item.tar_index is not None and item.tarinfo is not None
    source_path = sources[item.tar_index][1]
    try:
        tar, info = tars[item.tar_index], item.tarinfo
        # a regular member's bytes lie whole at its data offset: read there, not through tarfile's
        # per-member file object (sync tars hold no sparse members; another tar still may)
        body = _MemberAt(tar.fileobj, info.offset_data, info.size) \
            if not info.issparse() and tar.fileobj is not None else tar.extractfile(info)
        if body is None:
            raise RlkeepError(f"{source_path}: member {item.tarinfo.name!r} has no data")
        with body:
            yield body  # type: ignore[misc]
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise RlkeepError(f"{source_path}: member {item.tarinfo.name!r} could not be read ({error}); "
                          "the sync tar is truncated or corrupt: rerun the sync step") from None


@contextmanager
def _member_body(item: Planned, tars: list[tarfile.TarFile], sources: list[tuple[str, Path]],
                 rewriters: dict[int, MemberRewriter]) -> Iterator[IO[bytes]]:
    """A reader of a kept member's bytes: the job file, or its member of a source tar (rewritten
    into a temp file when its source's rewriter names it)."""
    if item.path is not None:
        with open(item.path, "rb") as handle:
            yield _ExactReader(handle, item.entry.size, str(item.path))  # type: ignore[misc]
        return
    assert item.tar_index is not None and item.tarinfo is not None
    rewriter = rewriters.get(item.tar_index)
    with _source_body(item, tars, sources) as body:
        if rewriter is None or not rewriter.is_dirty(item.tarinfo.name):
            yield body
            return
        with rewriter.redacted(body, item.tarinfo.name, item.tarinfo.size) as rewritten:
            yield rewritten


class _FixedBlocks(io.RawIOBase):
    """Hands `sink` exactly `block` bytes per write (the last one shorter), whatever sizes the
    tar writes in: the threaded gzip writer deflates each write as a block of its own."""

    def __init__(self, sink: IO[bytes], block: int) -> None:
        self._sink, self._block, self._pending = sink, block, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._pending += data
        whole = len(self._pending) - len(self._pending) % self._block
        for start in range(0, whole, self._block):
            self._sink.write(bytes(self._pending[start:start + self._block]))
        del self._pending[:whole]
        return len(data)

    def close(self) -> None:
        if not self.closed and self._pending:
            self._sink.write(bytes(self._pending))
            self._pending.clear()
        super().close()


@contextmanager
def _gzip_writer(raw: IO[bytes], threads: int | None = None, block: int | None = None) -> Iterator[IO[bytes]]:
    """A gzip stream into `raw` (left open): zlib-ng level GZIP_LEVEL, GZIP_BLOCK-byte blocks
    deflated by GZIP_THREADS threads; the header has mtime 0 and no name (gzip_ng_threaded's own,
    whatever the file object). Its writer is never flushed: a flush would start a second member."""
    threads, block = threads or GZIP_THREADS, block or GZIP_BLOCK
    with gzip_ng_threaded.open(raw, "wb", compresslevel=GZIP_LEVEL, threads=threads, block_size=block) as gz:
        blocks = _FixedBlocks(gz, block)
        try:
            yield blocks  # type: ignore[misc]
        finally:
            blocks.close()


def _write_tgz(out_tgz: Path, manifest_bytes: bytes, planned: list[Planned], tars: list[tarfile.TarFile],
               sources: list[tuple[str, Path]], rewriters: dict[int, MemberRewriter]) -> HashingWriter:
    """Write the tgz through a part file (removed on any failure); the writer holds its size and sha256."""
    tmp = out_tgz.with_name(f".{out_tgz.name}.part")
    # gzip only shrinks what it keeps (plus tar headers), so the kept bytes bound the archive
    kept_bytes = sum(p.entry.size + TAR_OVERHEAD_PER_MEMBER for p in planned if p.entry.reason is None)
    require_free(out_tgz, len(manifest_bytes) + kept_bytes, "archive")
    out_tgz.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "wb") as raw:
            hasher = HashingWriter(raw)
            with _gzip_writer(hasher) as gz:
                with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as out:
                    out.addfile(tar_member(MANIFEST_MEMBER, len(manifest_bytes)), io.BytesIO(manifest_bytes))
                    for item in planned:
                        _write_member(out, tars, sources, rewriters, item)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out_tgz)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return hasher


def build_archive(
    out_tgz: Path,
    manifest_path: Path,
    *,
    sources: list[tuple[str, Path]],
    extra_files: list[tuple[str, Path]],
    summary: dict[str, Any],
    large_threshold: int = DEFAULT_LARGE_THRESHOLD,
    rewriters: dict[str, MemberRewriter] | None = None,
) -> dict[str, Any]:
    """Write `out_tgz` and `manifest_path` (each atomically) and return the evidence.

    sources: (tree, tar) pairs, e.g. ("logs", sync/logs.tar), ("trace_jobs", sync/trace_jobs.tar);
    members land under `<tree>/`. extra_files: (name, path) pairs; they land under `rlkeep/<name>`.
    summary: run, cluster, jobs, first_submitted, last_finished, tracker (see summary_from_chain).
    rewriters: tree -> what rewrites that tree's members on their way in (the redaction).
    """
    out_tgz, manifest_path = Path(out_tgz), Path(manifest_path)
    if large_threshold < 0:
        raise RlkeepError(f"archive: large_threshold is {large_threshold}; expected a byte count >= 0")
    _check_trees([tree for tree, _ in sources])
    with ExitStack() as stack:
        by_index = {index: (rewriters or {})[tree] for index, (tree, _) in enumerate(sources) if tree in (rewriters or {})}
        tars, planned = _open_and_plan(stack, sources, extra_files, large_threshold, by_index)
        entries = [p.entry for p in planned]
        manifest_bytes = manifest_text(summary, entries).encode("utf-8")
        hasher = _write_tgz(out_tgz, manifest_bytes, planned, tars, sources, by_index)
    atomic_write_bytes(manifest_path, manifest_bytes)

    kept = [e for e in entries if e.reason is None]
    skipped = [e for e in entries if e.reason is not None]
    by_reason: dict[str, dict[str, int]] = {}
    for entry in skipped:
        slot = by_reason.setdefault(str(entry.reason), {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += entry.size
    return {
        "status": "completed",
        "tgz": str(out_tgz),
        "tgz_bytes": hasher.size,
        "sha256": hasher.digest.hexdigest(),
        "manifest": str(manifest_path),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "kept_files": len(kept),
        "kept_bytes": sum(e.size for e in kept),
        "skipped_files": len(skipped),
        "skipped_bytes": sum(e.size for e in skipped),
        "skipped_by_reason": by_reason,
        "trees": sorted({e.member.split("/", 1)[0] + "/" for e in kept}),
        "large_threshold": large_threshold,
    }


def _write_member(out: tarfile.TarFile, tars: list[tarfile.TarFile], sources: list[tuple[str, Path]],
                  rewriters: dict[int, MemberRewriter], item: Planned) -> None:
    """The member as tarfile's addfile(tar_member(...)) writes it, byte for byte, with the header
    built by member_header (tarfile's own header code costs more than the compression of a small
    member)."""
    if item.entry.reason is not None:
        return
    size = item.entry.size
    with _member_body(item, tars, sources, rewriters) as body:
        header = member_header(item.entry.member, size)
        out.fileobj.write(header)  # type: ignore[union-attr]
        left = size
        while left:
            chunk = body.read(min(left, 1 << 20))
            if not chunk:
                raise RlkeepError(f"archive member {item.entry.member}: its source ended {left} bytes early "
                                  "(it changed since it was planned); rerun the archive step")
            out.fileobj.write(chunk)  # type: ignore[union-attr]
            left -= len(chunk)
        padding = -size % tarfile.BLOCKSIZE
        out.fileobj.write(tarfile.NUL * padding)  # type: ignore[union-attr]
        out.offset += len(header) + size + padding
