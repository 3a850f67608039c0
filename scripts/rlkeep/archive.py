"""Archive a finished run: one deterministic `.tgz` of everything informative, plus its MANIFEST.

Pack-rat by design (runbook crud-archive-run): every member of the two sync tars and the
job's small files goes in, except what is both non-informative and large: weights and
checkpoints, core and memory dumps, caches, and raw terminal recordings above a size
threshold. Nothing is skipped silently: the MANIFEST lists every artifact as kept or skipped
with its size (and reason).

Members are streamed from the source tars straight into the output (random access into the
plain tar, no extraction to disk) in sorted order with fixed metadata, and the gzip header
carries no time and no file name, so the same inputs give the same bytes. The MANIFEST is
also the archive's first member, so the tarball describes itself when found alone.
"""
from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import logging
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from rlkeep.diskspace import TAR_OVERHEAD_PER_MEMBER, require_free
from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.hub import upload_archive_to_hub
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.redaction import redact_tar, redactor_from_environment
from rlkeep.regions import store_to_archive
from rlkeep.steps import StepContext, check_transfer
from rlkeep.storage import CHUNK, ObjectMissing, S3Store, Store, open_store
from rlkeep.sync import HashingWriter, tar_member
from rlkeep.waits import seconds_from_env

log = logging.getLogger(__name__)

DEFAULT_LARGE_THRESHOLD = 10 << 20  # raw terminal recordings above this are skipped
MANIFEST_MEMBER = "MANIFEST"
TREE_NAMES = ("logs", "trace_jobs", "eval_jobs", "rlkeep")  # eval_jobs: eval runs (rlkeep.kinds)
GZIP_LEVEL = 6  # level 9 costs ~3x the CPU for a few percent on text-heavy trees
CONSISTENCY_WAIT_ENV = "RLKEEP_STORE_CONSISTENCY_WAIT"
DEFAULT_CONSISTENCY_WAIT = 30.0  # seconds a fresh upload may take to show in listings and reads

WEIGHT_PATTERNS = ("*.safetensors", "*.pt", "*.pth", "*.bin", "*.ckpt", "*.distcp", "*.gguf")
CACHE_PARTS = frozenset({
    "__pycache__", ".venv", ".cache", "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    "pip-cache", ".pip-cache", "uv-cache", ".uv-cache", ".conda", "pkgs",
})
CACHE_SUFFIXES = (".pyc", ".pyo")
# `core.*` is a core dump unless the suffix says it is text or source (an agent's `core.py`
# is informative): the runbook's own pattern would drop those.
CORE_TEXT_SUFFIXES = frozenset({
    "py", "pyi", "json", "jsonl", "txt", "log", "md", "rst", "yaml", "yml", "toml", "cfg", "ini", "csv",
    "c", "h", "cc", "cpp", "hpp", "rs", "go", "java", "js", "ts", "tsx", "jsx", "sh", "html", "css", "sql",
    "rb", "php", "kt", "swift", "scala", "lua", "r", "xml", "proto", "tex",
})
TERMINAL_RECORDINGS = ("*.pane", "recording.cast")


# --------------------------------------------------------------------------- the skip rule


def archive_rule(member: str, size: int, *, large_threshold: int) -> str | None:
    """Why `member` stays out of the archive, or None when it is kept.

    `member` is a '/'-separated path (the archive member name or a path inside a source).
    """
    parts = member.strip("/").split("/")
    name, folders = parts[-1], parts[:-1]
    if any(part in CACHE_PARTS for part in parts) or name.endswith(CACHE_SUFFIXES):
        return "cache"
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in WEIGHT_PATTERNS):
        return "weights"
    if any(fnmatch.fnmatchcase(folder, "global_step_*") for folder in folders):
        return "checkpoint"
    if name == "core" or name.endswith(".hprof") or (
        name.startswith("core.") and name[len("core."):].rsplit(".", 1)[-1].lower() not in CORE_TEXT_SUFFIXES
    ):
        return "core_dump"
    if size > large_threshold and any(fnmatch.fnmatchcase(name, pattern) for pattern in TERMINAL_RECORDINGS):
        return "large_terminal_recording"
    return None


# --------------------------------------------------------------------------- MANIFEST text


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(text: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        code = next(chars, "")
        out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}.get(code, "\\" + code))
    return "".join(out)


def _summary_value(summary: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = summary.get(key)
    if value is None or value == "" or value == []:
        if required:
            raise RlkeepError(f"archive summary: field '{key}' is missing; expected a value for the MANIFEST line")
        return "none"
    if isinstance(value, (list, tuple)):
        text = ",".join(str(item) for item in value)
    else:
        text = str(value)
    if any(char.isspace() for char in text):
        raise RlkeepError(f"archive summary: field '{key}' is {text!r}; expected a value without spaces")
    return text


def summary_line(summary: dict[str, Any], kept: tuple[int, int], skipped: tuple[int, int]) -> str:
    """`run=<job> kind=rl cluster=<c> jobs=<id,id> dates=<a>..<b> kept=<n>files,<b>bytes ...`."""
    first = _summary_value(summary, "first_submitted")
    last = _summary_value(summary, "last_finished")
    fields = [
        f"run={_summary_value(summary, 'run', required=True)}",
        f"kind={_summary_value({'kind': summary.get('kind', 'rl')}, 'kind')}",
        f"cluster={_summary_value(summary, 'cluster')}",
        f"jobs={_summary_value(summary, 'jobs', required=True)}",
        f"dates={first}..{last}",
        f"kept={kept[0]}files,{kept[1]}bytes",
        f"skipped={skipped[0]}files,{skipped[1]}bytes",
        f"tracker={_summary_value(summary, 'tracker')}",
    ]
    return " ".join(fields)


def summary_from_chain(record: Any, chain: dict[str, Any]) -> dict[str, Any]:
    """The MANIFEST summary from a JobRecord and `<job>/chain.json` (times are epoch ms, UTC)."""
    attempts = chain.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        raise RlkeepError("chain.json: field 'attempts' is missing or empty; expected the run's attempts in order")

    def iso(ms: Any) -> str:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    submitted = [a["submitted_ms"] for a in attempts if isinstance(a, dict) and a.get("submitted_ms") is not None]
    finished = [a["finished_ms"] for a in attempts if isinstance(a, dict) and a.get("finished_ms") is not None]
    return {
        "run": record.job,
        "kind": getattr(record, "kind", "rl"),
        "cluster": record.cluster,
        "jobs": [a.get("id") for a in attempts if isinstance(a, dict)] or list(record.chain),
        "first_submitted": iso(min(submitted)) if submitted else None,
        "last_finished": iso(max(finished)) if finished else None,
        "tracker": record.tracker_url or chain.get("tracker_url"),
    }


@dataclass(frozen=True)
class ManifestEntry:
    member: str
    size: int
    reason: str | None  # None: kept

    def line(self) -> str:
        if self.reason is None:
            return f"kept\t{self.size}\t{_escape(self.member)}"
        return f"skipped\t{self.size}\t{_escape(self.member)}\t{self.reason}"


def manifest_text(summary: dict[str, Any], entries: list[ManifestEntry]) -> str:
    kept = [e for e in entries if e.reason is None]
    skipped = [e for e in entries if e.reason is not None]
    head = summary_line(summary, (len(kept), sum(e.size for e in kept)), (len(skipped), sum(e.size for e in skipped)))
    return "\n".join([head, *(entry.line() for entry in entries)]) + "\n"


def parse_manifest(text: str, where: str) -> tuple[dict[str, str], list[ManifestEntry]]:
    """(summary fields, entries); raises RlkeepError naming the line of anything malformed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise RlkeepError(f"{where}: empty MANIFEST; expected a summary line and one line per artifact")
    summary: dict[str, str] = {}
    for token in lines[0].split(" "):
        key, sep, value = token.partition("=")
        if not sep:
            raise RlkeepError(f"{where}: line 1: {token!r} is not key=value; expected the run summary line")
        summary[key] = value
    for key in ("run", "kind", "cluster", "jobs", "dates", "kept", "skipped", "tracker"):
        if key not in summary:
            raise RlkeepError(f"{where}: line 1: field '{key}' is missing from the summary line")
    entries: list[ManifestEntry] = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        try:
            if fields[0] == "kept" and len(fields) == 3:
                entries.append(ManifestEntry(_unescape(fields[2]), int(fields[1]), None))
                continue
            if fields[0] == "skipped" and len(fields) == 4 and fields[3]:
                entries.append(ManifestEntry(_unescape(fields[2]), int(fields[1]), fields[3]))
                continue
        except ValueError:
            pass
        raise RlkeepError(f"{where}: line {number}: {line[:200]!r}; expected kept<TAB>size<TAB>member "
                          "or skipped<TAB>size<TAB>member<TAB>reason")
    return summary, entries


def _counts(value: str) -> tuple[int, int]:
    files, _, size = value.partition(",")
    return int(files.removesuffix("files")), int(size.removesuffix("bytes"))


# --------------------------------------------------------------------------- sources


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


def build_archive(
    out_tgz: Path,
    manifest_path: Path,
    *,
    sources: list[tuple[str, Path]],
    extra_files: list[tuple[str, Path]],
    summary: dict[str, Any],
    large_threshold: int = DEFAULT_LARGE_THRESHOLD,
) -> dict[str, Any]:
    """Write `out_tgz` and `manifest_path` (each atomically) and return the evidence.

    sources: (tree, tar) pairs, e.g. ("logs", sync/logs.tar), ("trace_jobs", sync/trace_jobs.tar);
    members land under `<tree>/`. extra_files: (name, path) pairs; they land under `rlkeep/<name>`.
    summary: run, cluster, jobs, first_submitted, last_finished, tracker (see summary_from_chain).
    """
    out_tgz, manifest_path = Path(out_tgz), Path(manifest_path)
    if large_threshold < 0:
        raise RlkeepError(f"archive: large_threshold is {large_threshold}; expected a byte count >= 0")
    trees = [tree for tree, _ in sources]
    for tree in trees:
        if tree not in TREE_NAMES or tree == "rlkeep":
            raise RlkeepError(f"archive source tree {tree!r}: expected one of logs, trace_jobs, eval_jobs")
    if len(set(trees)) != len(trees):
        raise RlkeepError(f"archive sources name a tree twice ({trees}); expected each sync tar once")

    with ExitStack() as stack:
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

        entries = [p.entry for p in planned]
        manifest_bytes = manifest_text(summary, entries).encode("utf-8")
        tmp = out_tgz.with_name(f".{out_tgz.name}.part")
        # gzip only shrinks what it keeps (plus tar headers), so the kept bytes bound the archive
        require_free(out_tgz, len(manifest_bytes) + sum(e.size + TAR_OVERHEAD_PER_MEMBER for e in entries if e.reason is None),
                     "archive")
        out_tgz.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "wb") as raw:
                hasher = HashingWriter(raw)
                with gzip.GzipFile(filename="", mode="wb", fileobj=hasher, mtime=0, compresslevel=GZIP_LEVEL) as gz:
                    with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as out:
                        out.addfile(tar_member(MANIFEST_MEMBER, len(manifest_bytes)), io.BytesIO(manifest_bytes))
                        for item in planned:
                            _write_member(out, tars, sources, item)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, out_tgz)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
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


def _write_member(out: tarfile.TarFile, tars: list[tarfile.TarFile], sources: list[tuple[str, Path]], item: Planned) -> None:
    entry = item.entry
    if entry.reason is not None:
        return
    info = tar_member(entry.member, entry.size)
    if item.path is not None:
        with open(item.path, "rb") as handle:
            out.addfile(info, _ExactReader(handle, entry.size, str(item.path)))  # type: ignore[arg-type]
        return
    assert item.tar_index is not None and item.tarinfo is not None
    source_path = sources[item.tar_index][1]
    try:
        body = tars[item.tar_index].extractfile(item.tarinfo)
        if body is None:
            raise RlkeepError(f"{source_path}: member {item.tarinfo.name!r} has no data")
        out.addfile(info, body)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise RlkeepError(f"{source_path}: member {item.tarinfo.name!r} could not be read ({error}); "
                          "the sync tar is truncated or corrupt: rerun the sync step") from None


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
            with gzip.GzipFile(fileobj=buffered, mode="rb") as gz:
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
        except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
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
        if _counts(summary["kept"]) != (len(kept), sum(e.size for e in kept)):
            problems.append(f"MANIFEST summary kept={summary['kept']} disagrees with its {len(kept)} kept lines")
        if _counts(summary["skipped"]) != (len(skipped), sum(e.size for e in skipped)):
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


# --------------------------------------------------------------------------- upload


class _DiscardSink:
    """A rewindable sink that keeps nothing (read_into hashes; a retry seeks back and truncates)."""

    def __init__(self) -> None:
        self.position = 0

    def write(self, data: bytes) -> int:
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = 0) -> int:
        self.position = position
        return position

    def truncate(self, size: int | None = None) -> int:
        return self.position


def _remote_problem(store: Store, key: str, local_size: int, local_sha: str) -> tuple[str | None, int, str]:
    """(what is wrong with the remote copy of `key`, or None; its size; its sha256).

    The object must be in a listing of its folder with the local size (what anyone browsing the
    destination sees), answer a HEAD with that size (S3), and a fresh full read must give the
    local sha256: three views a store with list-after-write lag may not agree on yet.
    """
    from rlkeep.storage import ObjectMissing

    parent = key.rsplit("/", 1)[0] if "/" in key else ""
    listed = next((info.size for info in store.list(parent) if info.key == key), None)
    if listed is None:
        return "not in the listing of its folder", -1, ""
    if listed != local_size:
        return f"listed with {listed} bytes, the local file has {local_size}", listed, ""
    if isinstance(store, S3Store):
        try:
            headed = store.head(key).size
        except ObjectMissing:
            return "listed, but a HEAD answers no such object", listed, ""
        if headed != local_size:
            return f"a HEAD gives {headed} bytes, the local file has {local_size}", headed, ""
    try:
        read_size, remote_sha = store.read_into(key, _DiscardSink())  # type: ignore[arg-type]
    except ObjectMissing:
        return "listed, but a read answers no such object", listed, ""
    if read_size != local_size or remote_sha != local_sha:
        return (f"a fresh read gave {read_size} bytes with sha256 {remote_sha}, the local file has {local_size} bytes "
                f"with sha256 {local_sha}"), read_size, remote_sha
    return None, read_size, remote_sha


def consistency_bound() -> float:
    """Seconds verification waits for a store to show an upload it just took (RLKEEP_STORE_CONSISTENCY_WAIT)."""
    return seconds_from_env(CONSISTENCY_WAIT_ENV, DEFAULT_CONSISTENCY_WAIT)

def verified_remote_copy(store: Store, url: str, path: Path) -> dict[str, Any]:
    """Hold the remote `url` (key path.name of store) to the local file, re-checking while a store
    with list-after-write lag catches up (bounded); raise RlkeepError naming what still differs."""
    import time

    local_size, local_sha = path.stat().st_size, sha256_file(path)
    bound = consistency_bound()
    started = time.monotonic()
    pause, checks = 0.25, 0
    while True:
        checks += 1
        problem, size, sha = _remote_problem(store, path.name, local_size, local_sha)
        if problem is None:
            if checks > 1:
                log.info("%s: the store showed the upload after %d checks (%.1f s)", url, checks,
                         time.monotonic() - started)
            return {"url": url, "key": path.name, "size": size, "sha256": sha}
        waited = time.monotonic() - started
        if waited + pause > bound:
            raise RlkeepError(f"{url}: {problem} (local {path}); still so after {checks} checks over {waited:.1f} s, "
                              f"the {bound:g} s allowed for the store to show an upload ({CONSISTENCY_WAIT_ENV}); "
                              "the archive upload is not verified")
        log.info("%s: %s; checking again in %.2f s (the store may not show a fresh upload everywhere yet)",
                 url, problem, pause)
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def _archive_base(dest_url: str, job: str, paths: tuple[Path, ...]) -> str:
    if not job or "/" in job or job in {".", ".."}:
        raise RlkeepError(f"archive upload: job {job!r} is not a valid folder name")
    for path in paths:
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; build and verify the archive before uploading it")
    return f"{dest_url.rstrip('/')}/{job}"


def upload_archive(tgz: Path, manifest: Path, dest_url: str, job: str) -> dict[str, Any]:
    """Upload the tgz and MANIFEST under `<dest>/<job>/`, then verify both remotely (see below)."""
    tgz, manifest = Path(tgz), Path(manifest)
    base = _archive_base(dest_url, job, (tgz, manifest))
    store = open_store(base)
    for path in (tgz, manifest):
        store.put_file(path.name, path)
    return verify_uploaded_archive(tgz, manifest, dest_url, job)


def verify_uploaded_archive(tgz: Path, manifest: Path, dest_url: str, job: str) -> dict[str, Any]:
    """Hold `<dest>/<job>/<tgz name>` and `<dest>/<job>/<manifest name>` to the local files.

    Size from the listing and a HEAD, sha256 from a fresh full read of the remote object; an
    ETag is never taken as a content hash. A store with list-after-write lag is given up to
    RLKEEP_STORE_CONSISTENCY_WAIT seconds to agree; any difference left raises RlkeepError.
    """
    tgz, manifest = Path(tgz), Path(manifest)
    base = _archive_base(dest_url, job, (tgz, manifest))
    store = open_store(base)
    objects = [verified_remote_copy(store, f"{base}/{path.name}", path) for path in (tgz, manifest)]
    return {"status": "completed", "dest": base, "objects": objects,
            "verified": "listing and (S3) HEAD size, and sha256 of a fresh full read, against the local files"}


def iter_manifest_entries(manifest_path: Path) -> Iterable[ManifestEntry]:
    """The artifacts listed in a MANIFEST file (for reports)."""
    _, entries = parse_manifest(Path(manifest_path).read_text(encoding="utf-8"), str(manifest_path))
    return entries


# --------------------------------------------------------------------------- pipeline steps


def archive_step(ctx: StepContext) -> None:
    """`<job>/archive/<job>_archive.tgz` + `MANIFEST`: everything informative, never weights or dumps.

    The trees follow the run's kind (rlkeep.kinds): `logs/` always, plus the trace tree as
    `trace_jobs/` (rl, datagen) or `eval_jobs/` (eval); sft has none. Independent of the metric
    surface on purpose: a malformed trainer log must not block the archive (the logs and the
    run's own metric CSVs are inside logs.tar either way).
    """

    spec = ctx.record.spec
    chain = read_json(ctx.inputs["chain"])
    extra = [(name, ctx.inputs[key]) for name, key in (
        ("chain.json", "chain"), ("retries.json", "retries"),
        ("sync/logs.manifest.json", "logs_manifest"), ("sync/trace_jobs.manifest.json", "traces_manifest"))
        if key in ctx.inputs]
    extra.append((f"records/{ctx.record.path.name}", ctx.record.path))
    trees = [("logs", "logs")]
    if spec.archive_tree is not None:
        if "traces" not in ctx.inputs:
            raise RlkeepError(f"archive of a {spec.name} run needs the synced trace tree (sync/trace_jobs.tar)")
        trees.append((spec.archive_tree, "traces"))
    # The archive may leave this machine (archive.dest): its text passes the same redaction as
    # every other destination; binary members are copied as they are.

    work = ctx.work_dir("archive")
    redactor = redactor_from_environment()
    redacted = {}
    for name, key in trees:
        report = redact_tar(ctx.inputs[key], work / f"{name}.redacted.tar", redactor, work_dir=work / "scratch")
        redacted[name] = work / f"{name}.redacted.tar"
        log.info("archive: %s: %d text members redacted (%d findings), %d binary members copied as they are",
                 name, report["members_redacted"], len(report["findings"]), report["binary_members"])
    evidence = build_archive(
        ctx.outputs["tgz"], ctx.outputs["manifest"],
        sources=[(name, redacted[name]) for name, _ in trees],
        extra_files=extra,
        summary=summary_from_chain(ctx.record, chain),
        large_threshold=int(ctx.settings.get("large_terminal_bytes", DEFAULT_LARGE_THRESHOLD)),
    )
    log.info("archive: %s kept files (%s bytes), %s skipped", evidence.get("kept_files"), evidence.get("kept_bytes"),
             evidence.get("skipped_files"))
    for path in redacted.values():
        path.unlink(missing_ok=True)


HF_DATASET_PREFIX = "hf://datasets/"


def upload_and_verify(tgz: Path, manifest: Path, dest: str, job: str) -> dict[str, Any]:
    """Copy the archive to `dest` (s3://, file:// or hf://datasets/<org>/<name>) and verify the copy."""
    if dest.startswith(HF_DATASET_PREFIX):
        repo_id = dest[len(HF_DATASET_PREFIX):].strip("/")
        return upload_archive_to_hub(tgz, manifest, repo_id, job, private=True)
    return upload_archive(tgz, manifest, dest, job)


def verify_archive_step(ctx: StepContext) -> None:
    """`<job>/verify/archive.json`: the tarball lists the kind's expected trees; the remote copy matches."""

    spec = ctx.record.spec
    local = verify_archive(ctx.inputs["tgz"], ctx.inputs["manifest"], expected_trees=list(spec.expected_archive_trees))
    dest = ctx.settings.get("dest")
    remote = None
    transfer: dict[str, Any] | str = "not_applicable: the record names no archive.dest"
    if dest:
        # The archive is the run's data: it leaves the store's region when archive.dest is elsewhere.
        transfer = check_transfer(ctx, nbytes=ctx.inputs["tgz"].stat().st_size, what=f"archive upload to {dest}",
                                  **store_to_archive(ctx.record))
        remote = upload_and_verify(ctx.inputs["tgz"], ctx.inputs["manifest"], dest, ctx.job)
    write_json(ctx.outputs["verify"], {"status": "completed", "kind": spec.name, "local": local, "dest": dest,
                                       "transfer": transfer,
                                       "remote": remote if remote else "not_applicable: the record names no archive.dest"})
