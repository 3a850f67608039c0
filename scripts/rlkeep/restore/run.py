"""Restore a run's archive: read its MANIFEST, refuse to replace what exists, stream the tgz into the
target member by member, and say what could not be restored.

The MANIFEST object beside the tgz is read first; when it is gone, the archive's own first member
(the same text) is read instead, so the tgz alone is enough.
"""
from __future__ import annotations

import logging
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from rlkeep.archive.manifest import MANIFEST_MEMBER, ManifestEntry, parse_manifest
from rlkeep.errors import RlkeepError
from rlkeep.restore.extract import Extraction, Target, extract, kept_entries
from rlkeep.restore.source import ArchiveLocation, open_member_object, read_small_object
from rlkeep.urls import join_url

log = logging.getLogger("rlkeep.restore")
EXISTING_SHOWN = 3  # a refusal names the first few files it would replace; the rest are counted


@dataclass
class Restored:
    """The outcome of one restore: what was found, and every problem (empty: whole)."""

    location: ArchiveLocation
    target: str
    kept: dict[str, ManifestEntry]
    extraction: Extraction
    manifest_bytes: bytes
    manifest_source: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def evidence(self) -> dict[str, Any]:
        return {"status": "completed" if not self.problems else "failed", "archive": self.location.describe(),
                "manifest_source": self.manifest_source, "target": self.target, **self.extraction.evidence(self.kept),
                "verified": "every restored file's size and sha256 against the archive's MANIFEST",
                "seconds": round(self.seconds, 3), "problems": self.problems}

    def message(self) -> str:
        shown = "; ".join(self.problems)
        return (f"restore of {self.location.describe()} into {self.target} is incomplete: {shown}. "
                f"{len(self.extraction.restored)} of {len(self.kept)} files were restored and checked")


def _embedded_manifest(location: ArchiveLocation) -> bytes:
    """The archive's first member, read from the start of the stream (then the read is abandoned)."""
    import gzip

    with open_member_object(location, location.tgz_name) as stream:
        try:
            with gzip.GzipFile(fileobj=stream, mode="rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
                first = next(iter(tar), None)
                body = tar.extractfile(first) if first is not None and first.name == MANIFEST_MEMBER else None
                if body is None:
                    raise RlkeepError(f"{location.describe()}: its first member is not {MANIFEST_MEMBER}")
                return body.read()
        except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
            raise RlkeepError(f"{location.describe()}: cannot read its {MANIFEST_MEMBER} member ({error})") from None


def read_manifest(location: ArchiveLocation) -> tuple[bytes, str]:
    """(MANIFEST text, where it came from): the object beside the tgz, else the tgz's first member."""
    url = join_url(location.base, MANIFEST_MEMBER)
    try:
        return read_small_object(location, MANIFEST_MEMBER), url
    except FileNotFoundError:
        log.warning("%s: missing; reading the MANIFEST from the archive's first member instead", url)
    try:
        return _embedded_manifest(location), f"{location.describe()}: member {MANIFEST_MEMBER}"
    except FileNotFoundError:
        raise RlkeepError(f"neither {url} nor {location.describe()} exists: nothing to restore (is --from the "
                          "record's archive.dest, and the job name right?)") from None


def restore_archive(location: ArchiveLocation, target: Target, *, overwrite: bool = False) -> Restored:
    """Restore every kept member into target (see the module docstring). Raises RlkeepError before
    anything is written when target already holds one of the files and overwrite is False."""
    started = time.monotonic()
    manifest_bytes, manifest_source = read_manifest(location)
    try:
        _, entries = parse_manifest(manifest_bytes.decode("utf-8"), manifest_source)
    except UnicodeDecodeError as error:
        raise RlkeepError(f"{manifest_source}: not UTF-8 text (byte {error.start})") from None
    kept = kept_entries(entries)
    if not overwrite:
        present = target.existing([MANIFEST_MEMBER, *kept])
        if present:
            more = len(present) - EXISTING_SHOWN
            raise RlkeepError(f"restore target {target.description} already holds {len(present)} of the archive's "
                              f"files ({', '.join(present[:EXISTING_SHOWN])}" + (f" and {more} more" if more > 0 else "")
                              + "); nothing was written. Restore into an empty folder or prefix (--to), or pass "
                              "--overwrite to replace them")
    try:
        with open_member_object(location, location.tgz_name) as stream:
            extraction = extract(stream, kept, target)
    except FileNotFoundError:
        extraction = Extraction(ended_early=f"{location.describe()} does not exist")
    target.write_bytes(MANIFEST_MEMBER, manifest_bytes)  # type: ignore[attr-defined]
    restored = Restored(location, target.description, kept, extraction, manifest_bytes, manifest_source)
    restored.problems = extraction.problems(kept, manifest_bytes)
    if location.sha256 and extraction.archive_sha256 and extraction.archive_sha256 != location.sha256:
        restored.problems.append(f"the archive read has sha256 {extraction.archive_sha256}, the one verified had "
                                 f"{location.sha256}: it changed at its destination after verification")
    if extraction.unchecked:
        log.warning("%d restored file(s) were checked by size only: the MANIFEST (written before it carried "
                    "sha256) has no digest for them", len(extraction.unchecked))
    restored.seconds = time.monotonic() - started
    return restored
