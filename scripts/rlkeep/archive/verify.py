"""Verify a built archive: re-read the tgz to its end (gzip checks its CRC there) and hold every
member to the MANIFEST, listing every problem found.
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from pathlib import Path
from typing import IO, Any

from isal import igzip, isal_zlib

from rlkeep.archive.manifest import MANIFEST_MEMBER, parse_manifest, summary_counts
from rlkeep.errors import RlkeepError
from rlkeep.storage import CHUNK

# --------------------------------------------------------------------------- verification


class _HashingReader(io.RawIOBase):
    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.handle.read(len(buffer))
        buffer[: len(data)] = data
        self.digest.update(data)
        self.size += len(data)
        return len(data)


def _read_tgz(tgz: Path) -> tuple[dict[str, tuple[int, bool]], bytes | None, list[str], str, int]:
    """Members {name: (size, is_file)}, the embedded MANIFEST, duplicates, sha256 and size of the file."""
    members: dict[str, tuple[int, bool]] = {}
    duplicates: list[str] = []
    embedded: bytes | None = None
    with open(tgz, "rb") as raw:
        reader = _HashingReader(raw)
        buffered = io.BufferedReader(reader, CHUNK)
        try:
            with igzip.GzipFile(fileobj=buffered, mode="rb") as gz:  # ISA-L: 2-3x zlib's inflate
                with tarfile.open(fileobj=gz, mode="r|") as tar:
                    for info in tar:
                        if info.name in members:
                            duplicates.append(info.name)
                        members[info.name] = (info.size, info.isfile())
                        if info.name == MANIFEST_MEMBER and info.isfile():
                            body = tar.extractfile(info)
                            embedded = body.read() if body is not None else None
                while gz.read(CHUNK):  # to the end: gzip checks its CRC and length there
                    pass
        except (tarfile.TarError, OSError, EOFError, zlib.error, isal_zlib.error) as error:
            raise RlkeepError(f"{tgz}: not a readable gzip tar ({error}); rebuild the archive") from None
        while buffered.read(CHUNK):
            pass
    return members, embedded, duplicates, reader.digest.hexdigest(), reader.size


def verify_archive(tgz: Path, manifest_path: Path, *, expected_trees: list[str]) -> dict[str, Any]:
    """Re-read the tgz and hold it to its MANIFEST; raise RlkeepError listing every problem."""
    tgz, manifest_path = Path(tgz), Path(manifest_path)
    for path in (tgz, manifest_path):
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; build the archive first")
    manifest_bytes = manifest_path.read_bytes()
    try:
        summary, entries = parse_manifest(manifest_bytes.decode("utf-8"), str(manifest_path))
    except UnicodeDecodeError as error:
        raise RlkeepError(f"{manifest_path}: not UTF-8 text (byte {error.start})") from None
    members, embedded, duplicates, digest, size = _read_tgz(tgz)

    problems: list[str] = []
    if size == 0 or not members:
        problems.append("the archive is empty")
    kept = [e for e in entries if e.reason is None]
    skipped = [e for e in entries if e.reason is not None]
    try:
        if summary_counts(summary["kept"]) != (len(kept), sum(e.size for e in kept)):
            problems.append(f"MANIFEST summary kept={summary['kept']} disagrees with its {len(kept)} kept lines")
        if summary_counts(summary["skipped"]) != (len(skipped), sum(e.size for e in skipped)):
            problems.append(f"MANIFEST summary skipped={summary['skipped']} disagrees with its {len(skipped)} skipped lines")
    except ValueError:
        problems.append("MANIFEST summary kept=/skipped= are not <n>files,<n>bytes")
    if not kept:
        problems.append("MANIFEST keeps no artifact")
    for tree in expected_trees:
        prefix = tree.strip("/") + "/"
        if not any(name.startswith(prefix) for name in members):
            problems.append(f"expected tree {prefix} is not in the archive")
    for entry in kept:
        found = members.get(entry.member)
        if found is None:
            problems.append(f"kept member {entry.member} is missing from the archive")
        elif found != (entry.size, True):
            problems.append(f"kept member {entry.member} has {found[0]} bytes in the archive, MANIFEST says {entry.size}")
    for entry in skipped:
        if entry.member in members:
            problems.append(f"skipped member {entry.member} ({entry.reason}) is in the archive")
    listed = {e.member for e in kept} | {MANIFEST_MEMBER}
    for name in sorted(set(members) - listed)[:20]:
        problems.append(f"archive member {name} is not listed as kept in the MANIFEST")
    for name in duplicates[:20]:
        problems.append(f"archive member {name} appears twice")
    if embedded is None:
        problems.append(f"the archive has no {MANIFEST_MEMBER} member")
    elif embedded != manifest_bytes:
        problems.append(f"the archive's {MANIFEST_MEMBER} member differs from {manifest_path}")
    if problems:
        shown = "; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise RlkeepError(f"{tgz}: archive verification failed against {manifest_path}: {shown}")
    return {
        "status": "completed",
        "tgz": str(tgz),
        "tgz_bytes": size,
        "sha256": digest,
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "members": len(members),
        "kept_files": len(kept),
        "kept_bytes": sum(e.size for e in kept),
        "skipped_files": len(skipped),
        "trees": sorted({name.split("/", 1)[0] + "/" for name in members if "/" in name}),
        "expected_trees": [tree.strip("/") + "/" for tree in expected_trees],
        "summary": manifest_bytes.split(b"\n", 1)[0].decode("utf-8"),
    }
