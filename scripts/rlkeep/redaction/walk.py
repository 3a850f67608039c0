"""The tree and the tar: every file under a root (or every member of a tar) is classified, then
scanned and redacted in place (containers inside, rlkeep.redaction.containers), or skipped with
its reason; findings name kind, path, the member inside a container, and line. What could not
be read (and is not of a kind known to carry no text) is listed as unreadable: a check fails on it."""
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
from rlkeep.redaction.common import SEPARATOR, member_path
from rlkeep.redaction.containers import Walker
from rlkeep.redaction.engine import Redactor
from rlkeep.redaction.filetypes import SNIFF_SIZE, FileType, classify
from rlkeep.redaction.rewrite import LazyRewriter, Sink, TranscodingReader, TranscodingRewriter, install, temp_beside
from rlkeep.redaction.streams import Refused


@dataclass(frozen=True)
class Finding:
    """One credential-shaped text: its kind and where it is, never its value."""

    kind: str
    path: str  # relative path inside the scanned root ("" for in-memory text)
    line: int  # 1-based (in a parquet or arrow column: the cell's number)
    member: str = ""  # the path inside a container, levels joined by `::`; "" for the file itself

    def to_json(self) -> dict:
        found = {"kind": self.kind, "path": self.path, "line": self.line}
        return {**found, "member": self.member} if self.member else found


@dataclass
class TreeReport:
    findings: list[Finding] = field(default_factory=list)
    files_scanned: int = 0
    files_skipped: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path[::member], reason)
    bytes_decompressed: int = 0  # read through a decompressor (gzip, bzip2, xz, zstd, zip members)

    def to_json(self) -> dict:
        return {
            "findings": [finding.to_json() for finding in self.findings],
            "files_scanned": self.files_scanned,
            "files_skipped": [{"path": path, "reason": reason} for path, reason in self.files_skipped],
            "unreadable": [{"path": path, "reason": reason} for path, reason in self.unreadable],
        }


@dataclass(frozen=True)
class FileOutcome:
    findings: list[tuple[int, str]]  # (line, kind) in the file itself
    skipped_reason: str | None = None
    rewritten: bool = False
    member_findings: list[tuple[str, int, str]] = field(default_factory=list)  # (member, line, kind)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (member or "", reason)
    bytes_decompressed: int = 0


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
                return FileOutcome([], unreadable=[("", f"not scanned: binary ({kind.detail})")])
            if kind.handling == "verbatim":
                outcome = _scan_stream_file(path, source, FileType("text"), redactor, True, info.st_mode)
                if outcome.findings and not check:
                    raise RlkeepError(f"{rel}: credential-shaped text inside a {kind.detail} file; rlkeep cannot "
                                      "rewrite this format, so nothing was changed: rebuild it without the "
                                      "credential or remove it, then rerun")
                return outcome
            if kind.handling == "no_text":
                return FileOutcome([], f"not scanned: {kind.detail} (a kind that carries no text)")
            if kind.handling == "container":
                source.seek(0)
                return scan_container_file(path, rel, source, redactor, check=check, mode=info.st_mode)
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
        report.findings.extend(Finding(kind, rel, line, member) for member, line, kind in outcome.member_findings)
        report.unreadable.extend((member_path(rel, member) if member else rel, reason)
                                 for member, reason in outcome.unreadable)
        report.bytes_decompressed += outcome.bytes_decompressed
        if any(member == "" for member, _ in outcome.unreadable):
            pass  # the file as a whole could not be read: listed as unreadable, not as scanned
        elif outcome.skipped_reason:
            report.files_skipped.append((rel, outcome.skipped_reason))
        else:
            report.files_scanned += 1
        if outcome.rewritten:
            report.files_rewritten.append(rel)
    return report


# ---------------------------------------------------------------------------------------------
# Tars: the archive is a destination too, so what goes into it passes through the same redaction.


def redact_tar(source_tar: str | Path, dest_tar: str | Path, redactor: Redactor, *, work_dir: str | Path) -> dict:
    """Copy a tar, redacting every text member and every member inside a container member (a
    compressed log, a zip of agent outputs), keeping member names, order and metadata. A member
    that cannot be opened or rewritten (encrypted zip, bomb, corrupt container) stops it, naming
    the member; other binary members are copied as they are and counted. Returns the findings
    (kind, member, line; never the value). dest_tar appears only when complete."""
    source_tar, dest_tar, work_dir = Path(source_tar), Path(dest_tar), Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    partial = dest_tar.with_name(f".{dest_tar.name}.part")
    scan = Walker(redactor, work_dir=work_dir)
    with open(source_tar, "rb") as source:
        _process_or_refuse(scan, source, source_tar.name, str(source_tar))
        refused = [(where, reason) for where, reason in scan.unreadable if not reason.startswith("not scanned: binary")]
        if refused:
            where, reason = refused[0]
            raise RlkeepError(f"{source_tar}: member {where}: {reason}; rlkeep cannot read or redact it, so nothing "
                              "from this tree is archived: remove or re-pack that file at the source and rerun")
        try:
            with open(partial, "wb") as out:
                if scan.findings:
                    source.seek(0)
                    rewrite = Walker(redactor, work_dir=work_dir, dirty=frozenset(w for w, _, _ in scan.findings))
                    _process_or_refuse(rewrite, source, source_tar.name, str(source_tar), out)
                else:
                    source.seek(0)
                    shutil.copyfileobj(source, out, CHUNK_SIZE)
            os.replace(partial, dest_tar)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    members = {where.split(SEPARATOR, 1)[0] for where, _, _ in scan.findings}
    return {"source": str(source_tar), "binary_members": len(scan.unreadable),
            "members_redacted": len(members), "bytes_decompressed": scan.budget.decompressed,
            "findings": [{"kind": kind, "member": where, "line": line} for where, line, kind in scan.findings]}


def _process_or_refuse(walker: Walker, source: BinaryIO, name: str, label: str, out: BinaryIO | None = None) -> None:
    try:
        walker.process(source, name, "", out)
    except Refused as error:
        raise RlkeepError(f"{label}: {error}; rlkeep cannot read or redact it, so it is not published") from None


def scan_container_file(path: Path, rel: str, source: BinaryIO, redactor: Redactor, *, check: bool,
                        mode: int) -> FileOutcome:
    """A container on disk: scanned inside; with findings (and not `check`) rewritten in place
    with the members redacted, or, when part of it cannot be read, refused naming the member."""
    scan = Walker(redactor, work_dir=path.parent)
    try:
        scan.process(source, path.name, "", None, size=os.fstat(source.fileno()).st_size)
    except Refused as error:
        scan.unreadable.append(("", str(error)))
    outcome = FileOutcome([], member_findings=scan.findings, unreadable=scan.unreadable,
                          bytes_decompressed=scan.budget.decompressed)
    if check or not scan.findings:
        return outcome
    refused = [(where, reason) for where, reason in scan.unreadable if not reason.startswith("not scanned: binary")]
    if refused:
        where, reason = refused[0]
        raise RlkeepError(f"{rel}: {where or 'the file'}: {reason}; credential-shaped text was found in it and it "
                          "cannot be rewritten safely, so nothing was changed: remove or re-pack it and rerun")
    fd, tmp = temp_beside(path)
    handle = os.fdopen(fd, "wb")
    try:
        source.seek(0)
        rewrite = Walker(redactor, work_dir=path.parent, dirty=frozenset(where for where, _, _ in scan.findings))
        _process_or_refuse(rewrite, source, path.name, rel, handle)
        install(tmp, handle, path, mode)
    except BaseException:
        handle.close()
        Path(tmp).unlink(missing_ok=True)
        raise
    return FileOutcome([], rewritten=True, member_findings=scan.findings, unreadable=scan.unreadable,
                       bytes_decompressed=scan.budget.decompressed)


class TarRedaction:
    """The members of one tar, each scanned for findings while a reader streams it (the archive's
    digest pass) and, where a scan found one, redacted when the reader streams it again, so no
    redacted copy of the whole tar is written. A member that cannot be opened or rewritten
    (encrypted zip, bomb, corrupt container) stops it at its scan, naming the member, as
    redact_tar does."""

    def __init__(self, source_tar: str | Path, redactor: Redactor, *, work_dir: str | Path) -> None:
        self.source_tar, self.work_dir = Path(source_tar), Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.scan = Walker(redactor, work_dir=self.work_dir)
        self._rewrite = Walker(redactor, work_dir=self.work_dir, dirty=frozenset())

    def scan_member(self, body: BinaryIO, member: str, size: int) -> None:
        """Scan one member (its name as the tar has it) as the tar's own scan would; `body` may be
        read front to back only, and is not read to its end where the member's kind needs no
        more (a binary member is not read at all)."""
        findings, unreadable = len(self.scan.findings), len(self.scan.unreadable)
        self.scan._guarded(lambda: self.scan.process(body, member, member, None, 1, size), member)
        refused = [(where, reason) for where, reason in self.scan.unreadable[unreadable:]
                   if not reason.startswith("not scanned: binary")]
        if refused:
            where, reason = refused[0]
            raise RlkeepError(f"{self.source_tar}: member {where}: {reason}; rlkeep cannot read or redact it, so "
                              "nothing from this tree is archived: remove or re-pack that file at the source and rerun")
        self._rewrite.mark_dirty(where for where, _, _ in self.scan.findings[findings:])

    def is_dirty(self, member: str) -> bool:
        """Whether the scanned member (its name as the tar has it) had a finding or holds one."""
        return self._rewrite.is_dirty(member)

    def redacted(self, body: BinaryIO, member: str, size: int):  # type: ignore[no-untyped-def]
        """The member's bytes redacted, in a temp file at its start (close it to remove it)."""
        try:
            return self._rewrite._rewritten(body, member, member, 0, size)
        except Refused as error:
            raise RlkeepError(f"{self.source_tar}: member {member}: {error}; rlkeep cannot read or redact it, so "
                              "it is not published") from None

    def report(self) -> dict:
        """What redact_tar returns: findings (kind, member, line; never the value) and counts."""
        scan = self.scan
        members = {where.split(SEPARATOR, 1)[0] for where, _, _ in scan.findings}
        return {"source": str(self.source_tar), "binary_members": len(scan.unreadable),
                "members_redacted": len(members), "bytes_decompressed": scan.budget.decompressed,
                "findings": [{"kind": kind, "member": where, "line": line} for where, line, kind in scan.findings]}
