"""The tree and the tar: every file under a root (or every member of a tar) is classified, then
scanned and redacted in place, or skipped with its reason; findings name kind, path and line."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from rlkeep.errors import RlkeepError
from rlkeep.redaction.common import CHUNK_SIZE
from rlkeep.redaction.engine import Redactor
from rlkeep.redaction.filetypes import SNIFF_SIZE, FileType, classify
from rlkeep.redaction.rewrite import LazyRewriter, Sink, TranscodingReader, TranscodingRewriter, install, temp_beside


@dataclass(frozen=True)
class Finding:
    """One credential-shaped text: its kind and where it is, never its value."""

    kind: str
    path: str  # relative path inside the scanned root ("" for in-memory text)
    line: int  # 1-based


@dataclass
class TreeReport:
    findings: list[Finding] = field(default_factory=list)
    files_scanned: int = 0
    files_skipped: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "findings": [{"kind": f.kind, "path": f.path, "line": f.line} for f in self.findings],
            "files_scanned": self.files_scanned,
            "files_skipped": [{"path": path, "reason": reason} for path, reason in self.files_skipped],
        }


@dataclass(frozen=True)
class FileOutcome:
    findings: list[tuple[int, str]]
    skipped_reason: str | None = None
    rewritten: bool = False


def _scan_stream_file(path: Path, source: BinaryIO, kind: FileType, redactor: Redactor, check: bool,
                      mode: int) -> FileOutcome:
    source.seek(len(kind.bom))
    if kind.handling == "wide":
        reader = TranscodingReader(source, kind.detail, kind.unit)
        sink: Sink | None = None if check else TranscodingRewriter(path, kind.detail, kind.bom, mode)
        read: Callable[[int], bytes] = reader.read
    else:
        sink = None if check else LazyRewriter(path, source.fileno(), mode)
        read = source.read
    try:
        findings = redactor.redact_stream(read, sink)
        if isinstance(sink, TranscodingRewriter):
            sink.trailing = reader.trailing
        rewritten = sink.finish() if sink is not None else False
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    return FileOutcome(findings, rewritten=rewritten)


SAFETENSORS_REASON = "tensor data not scanned: binary (safetensors; JSON header scanned)"


def _scan_safetensors(path: Path, rel: str, source: BinaryIO, redactor: Redactor, check: bool,
                      mode: int) -> FileOutcome:
    source.seek(0)
    header_length = int.from_bytes(source.read(8), "little")
    header = source.read(header_length)
    redacted, findings = redactor.redact_bytes(header)
    if not findings or check:
        return FileOutcome(findings, SAFETENSORS_REASON)
    try:
        json.loads(redacted)
    except ValueError:
        raise RlkeepError(f"{rel}: redacting the safetensors header would break its JSON; file left as it was") from None
    if len(redacted) <= header_length:
        redacted = redacted.ljust(header_length, b" ")  # same data offsets
    else:
        redacted += b" " * (-len(redacted) % 8)
    fd, tmp = temp_beside(path)
    handle = os.fdopen(fd, "wb")
    try:
        handle.write(len(redacted).to_bytes(8, "little"))
        handle.write(redacted)
        source.seek(8 + header_length)
        while block := source.read(CHUNK_SIZE):
            handle.write(block)
        install(tmp, handle, path, mode)
    except BaseException:
        handle.close()
        Path(tmp).unlink(missing_ok=True)
        raise
    return FileOutcome(findings, SAFETENSORS_REASON, rewritten=True)


def scan_file(path: Path, rel: str, redactor: Redactor, *, check: bool) -> FileOutcome:
    """Scan one regular file (and redact it in place unless `check`)."""
    try:
        with open(path, "rb") as source:
            info = os.fstat(source.fileno())
            kind = classify(path.name, source.read(SNIFF_SIZE), info.st_size)
            if kind.handling == "binary":
                return FileOutcome([], f"not scanned: binary ({kind.detail})")
            if kind.handling == "safetensors":
                return _scan_safetensors(path, rel, source, redactor, check, info.st_mode)
            return _scan_stream_file(path, source, kind, redactor, check, info.st_mode)
    except OSError as error:
        raise RlkeepError(f"{rel}: cannot {'scan' if check else 'redact'}: {error.strerror or error}") from None


def _walk(root: Path) -> Iterator[tuple[Path, str, str | None]]:
    """(path, relative path, reason it is not a regular file or None), in a stable order."""
    if not root.is_dir():
        yield root, root.name, None
        return
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        base = Path(directory)
        for name in list(dirnames):
            if (base / name).is_symlink():
                dirnames.remove(name)
                yield base / name, (base / name).relative_to(root).as_posix(), "not scanned: symlink"
        for name in sorted(filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                yield path, rel, "not scanned: symlink"
            elif not stat.S_ISREG(mode):
                yield path, rel, "not scanned: not a regular file"
            else:
                yield path, rel, None


def redact_tree(root: str | Path, redactor: Redactor, *, check: bool = False) -> TreeReport:
    """Redact every file under `root` in place (with `check`, only report). Every file ends up
    either counted in files_scanned or listed in files_skipped with its reason."""
    root = Path(root)
    if not root.exists():
        raise RlkeepError(f"{root}: no such file or directory")
    report = TreeReport()
    for path, rel, not_regular in _walk(root):
        if not_regular:
            report.files_skipped.append((rel, not_regular))
            continue
        outcome = scan_file(path, rel, redactor, check=check)
        report.findings.extend(Finding(kind, rel, line) for line, kind in outcome.findings)
        if outcome.skipped_reason:
            report.files_skipped.append((rel, outcome.skipped_reason))
        else:
            report.files_scanned += 1
        if outcome.rewritten:
            report.files_rewritten.append(rel)
    return report


# ---------------------------------------------------------------------------------------------
# Tars: the archive is a destination too, so what goes into it passes through the same redaction.


def redact_tar(source_tar: str | Path, dest_tar: str | Path, redactor: Redactor, *, work_dir: str | Path) -> dict:
    """Copy a tar member by member, redacting every text member (binary members are copied as
    they are and counted), keeping member names, order and metadata. Returns the findings
    (kind, member, line; never the value). dest_tar appears only when complete."""
    source_tar, dest_tar, work_dir = Path(source_tar), Path(dest_tar), Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    partial = dest_tar.with_name(f".{dest_tar.name}.part")
    findings: list[dict] = []
    members = binary = 0
    try:
        with tarfile.open(source_tar, "r:*") as src, tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                if not member.isfile():
                    dst.addfile(member)
                    continue
                members += 1
                scratch = work_dir / Path(member.name).name  # the name matters for classification
                with src.extractfile(member) as body, open(scratch, "wb") as handle:  # type: ignore[union-attr]
                    shutil.copyfileobj(body, handle, CHUNK_SIZE)
                outcome = scan_file(scratch, member.name, redactor, check=False)
                if outcome.skipped_reason and not outcome.findings:
                    binary += 1
                findings += [{"kind": kind, "member": member.name, "line": line} for line, kind in outcome.findings]
                copy = tarfile.TarInfo(member.name)
                copy.size = scratch.stat().st_size
                copy.mtime, copy.mode, copy.uid, copy.gid = member.mtime, member.mode, member.uid, member.gid
                copy.uname, copy.gname = member.uname, member.gname
                with open(scratch, "rb") as handle:
                    dst.addfile(copy, handle)
                scratch.unlink()
        os.replace(partial, dest_tar)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return {"source": str(source_tar), "members": members, "binary_members": binary,
            "members_redacted": len({f["member"] for f in findings}), "findings": findings}
