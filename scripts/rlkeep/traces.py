"""Trace dataset: rebuild from the full trace tree, shard deterministically, gate on coverage.

Input is the sync step's `trace_jobs.tar` (member names relative to the trace root, e.g.
`<trial>/result.json`) or an already extracted trace root. Every trial directory is read:
`result.json`, the ATIF `agent/trajectory.json` with its `trajectory.cont-N.json`
continuations, the subagent trajectories `agent/trajectory.<kind>.json`, and `verifier/test-stdout.txt` +
`test-stderr.txt`. Rows are Harbor 0.26 `traces export` rows (rendering: rlkeep.trace_rows;
columns: `column_names(sharegpt)`, Harbor's order); shards are
`data/train-iiiii-of-nnnnn.parquet` carrying the `huggingface` Features metadata, next to
`trace_export_manifest.json` and the dataset card README.md (rlkeep.trace_card).

Decisions worth knowing (the manifest states the ones a reader of the data needs):
- Trial order is the sorted trial directory name; shard k holds the rows of the k-th group of
  `trials_per_shard` trials that produced rows, so the index advances only for non-empty
  shards. Same input, same options and same pyarrow version give the same bytes: fixed
  schema, fixed writer options, no timestamps.
- `result` (as Harbor 0.26): the exception type when result.json has one (a trial that timed out
  and was still verified is its `AgentTimeoutError`), else `rewards["reward"]` as
  `str(float(reward))` (its text when not a number), else null. `filter="success"` keeps trials
  whose `result` is a number above 0; `"failure"` the rest.
- `model` is the trajectory's `agent.model_name` as written (`hosted_vllm/Qwen3-8B`).
- `verifier_output` is test-stdout then test-stderr joined with nothing (Harbor's join).
- `instruction` (as Harbor 0.26): in the first trajectory file by name that is not a
  summarization, the first step's non-blank message, stripped (system or user).
- `agent`/`model`: main rows name the trajectory's `agent` block; subagent rows the run's agent
  (result.json) and the subagent trajectory's model. `model_provider` and `run_id` follow
  Harbor's fallbacks through result.json (agent_info.model_info.provider; config.job_id, ...,
  else the trial name).
- Where Harbor's table leaves a column out (it keeps the first row's keys only), rlkeep writes
  it anyway, empty: `tool_definitions` null, `trace_source` `main`. `tool_definitions` is the
  definitions' JSON text, where Harbor's `datasets` table infers a struct.
- Text is what the model saw: credentials are always redacted (counts per kind reach the
  manifest and the card) and lone surrogates, which parquet text cannot hold, become U+FFFD.
  Terminal-noise cleaning (ANSI/OSC escapes, bracketed-paste markers, carriage-return
  overwrites, other control characters, orphaned `</think>`) is an option, off by default, and
  recorded in the manifest's `text_changes` and the card.
- A trajectory whose first message is an agent turn is counted as malformed (`no_user_turn`)
  rather than given an invented prompt.
- Coverage = (trials with at least one row + trials excluded by the filter) / trial dirs with
  result.json, 1.0 when there are none. With episodes=all row_count can exceed result_count,
  so trials are counted, not rows. Malformed trials are counted by reason; `missing_result`
  (agent/ without result.json: the trial never finished) is reported but is not part of
  result_count.
- Output: the build happens in a sibling work dir `.<out>.build-*`; a passing build replaces
  our earlier shards and card (an operator's README.md is kept) and then writes the manifest,
  which is the completion marker. A build under the coverage gate withdraws the previous
  shards, card and manifest and leaves `trace_export_manifest.rejected.json` for inspection.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.hub import REPO_ID_RE, replace_trace_shards, verify_trace_publication
from rlkeep.jsonio import dumps, read_json, write_json
from rlkeep.jsonskim import SkimError, pick_members
from rlkeep.redaction import redactor_from_environment
from rlkeep.steps import StepContext
from rlkeep.trace_card import CARD_MARKER, CARD_NAME, CardInfo, render_card
from rlkeep.trace_rows import (
    COLUMNS, CONVERSATION_TYPE, MAIN_SOURCE, SHAREGPT_COLUMN, SHAREGPT_TYPE, SHARD_NAME, TEXT_COLUMNS, Context,
    column_names, context_messages, episode_conversations, row_schema, subagent_source, tools_block,
    whole_conversation,
)
from rlkeep.trace_rows import sharegpt as to_sharegpt  # the option is called `sharegpt`

EPISODES = ("last", "all")
FILTERS = ("none", "success", "failure")
FILTER_RULES = {"none": "every readable trial", "success": "reward > 0 and no exception",
                "failure": "the rest: reward missing or <= 0, or an exception (a timed-out trial included)"}
MANIFEST_NAME = "trace_export_manifest.json"
REJECTED_MANIFEST_NAME = "trace_export_manifest.rejected.json"
DATA_DIR = "data"
DEFAULT_MIN_COVERAGE = 0.95
DEFAULT_TRIALS_PER_SHARD = 200
# A row group is flushed once its text reaches this many characters: memory stays bounded
# even with episodes=all, where one long trial yields O(turns^2) text.
ROW_GROUP_CHARS = 16 * 1024 * 1024
MALFORMED_EXAMPLES = 10
HASH_CHUNK = 1 << 20
READ_CHUNK = 1 << 20  # tar members larger than this are read into one preallocated buffer

SCHEMA = row_schema()
# Short repeated values are dictionary encoded; long text is not (hashing it costs time, and
# the dictionary would overflow anyway).
DICTIONARY_COLUMNS = ["conversations.list.element.role", "agent", "model", "model_provider",
                      "task", "episode", "result"]
PARQUET_OPTIONS: dict[str, Any] = dict(
    compression="zstd", compression_level=3, use_dictionary=DICTIONARY_COLUMNS,
    write_statistics=True, version="2.6", data_page_version="1.0", write_page_index=False,
    store_schema=True, use_compliant_nested_type=True,
)


class CoverageError(RlkeepError):
    """Result coverage is under the gate; `manifest` holds the rejected build's manifest."""

    def __init__(self, message: str, manifest: dict[str, Any]):
        super().__init__(message)
        self.manifest = manifest


class TextRedactor(Protocol):
    def redact_text(self, text: str) -> tuple[str, list[tuple[int, str]]]: ...


# --------------------------------------------------------------------------- tar safety

def _member_path(name: str) -> PurePosixPath | None:
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


class _HashingReader:
    """A read-only file wrapper that hashes every byte read (tar stream mode reads sequentially)."""

    def __init__(self, handle: Any):
        self._handle = handle
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self.digest.update(data)
        return data


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
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


def _iter_members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
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
        reader = _HashingReader(raw)
        count = 0
        try:
            with tarfile.open(fileobj=reader, mode="r|*") as tar:
                for member in _iter_members(tar):
                    reason = unsafe_member_reason(member)
                    if reason:
                        raise RlkeepError(f"{tar_path}: refusing the whole tar: member {member.name!r}: {reason}")
                    count += 1
        except tarfile.TarError as error:
            raise RlkeepError(f"{tar_path}: not a readable tar after {count} members: {error}") from error
        while reader.read(HASH_CHUNK):  # trailing padding after the end-of-archive blocks
            pass
    return count, reader.digest.hexdigest()


def _extract_checked(tar_path: Path, dest: Path, select: Callable[[str], bool] | None) -> int:
    written = 0
    with tarfile.open(tar_path, mode="r:*") as tar:
        for member in _iter_members(tar):
            rel = _member_path(member.name)
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


def _safe_extract(tar_path: Path, dest: Path, select: Callable[[str], bool] | None) -> tuple[int, str]:
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
    return _safe_extract(tar_path, dest, select)[0]


# --------------------------------------------------------------------------- trial discovery

_CONTINUATION = re.compile(r"^agent/trajectory\.cont-(\d+)\.json$")
RESULT = "result.json"
MAIN_TRAJECTORY = "agent/trajectory.json"
VERIFIER_OUTPUT = ("verifier/test-stdout.txt", "verifier/test-stderr.txt")


def needed_for_export(rel: str) -> bool:
    """Whether the export reads this path (relative to the trial dir): result.json, the verifier
    output and every `trajectory*.json` below agent/ (continuations and subagent trajectories);
    panes, recordings, logs, configs and Terminus-2's episode-N/ call logs are never read."""
    if rel == RESULT or rel in VERIFIER_OUTPUT:
        return True
    parts = rel.split("/")
    return (len(parts) >= 2 and parts[0] == "agent" and parts[-1].startswith("trajectory")
            and rel.endswith(".json") and not any(part.startswith("episode-") for part in parts[1:-1]))


@dataclass(frozen=True)
class TrialContent:
    """The bytes of the files of one trial that the export reads, by path relative to the trial."""

    name: str
    files: dict[str, bytes]

    @property
    def result(self) -> bytes | None:
        return self.files.get(RESULT)

    def trajectories(self) -> list[tuple[str, bytes]]:
        """trajectory.json, then its continuations in numeric order (cont-2 before cont-10)."""
        continuations = sorted((int(match.group(1)), rel) for rel in self.files
                               if (match := _CONTINUATION.match(rel)))
        main = [MAIN_TRAJECTORY] if MAIN_TRAJECTORY in self.files else []
        return [(rel, self.files[rel]) for rel in main + [rel for _, rel in continuations]]


@dataclass(frozen=True)
class TrialFiles:
    """One trial directory on disk; `read()` loads the files the export needs."""

    name: str
    path: Path

    def read(self) -> TrialContent:
        files: dict[str, bytes] = {}
        for rel in (RESULT, *VERIFIER_OUTPUT):
            if (self.path / rel).is_file():
                files[rel] = (self.path / rel).read_bytes()
        agent = self.path / "agent"
        if agent.is_dir():
            for folder, dirs, names in os.walk(agent):
                dirs[:] = sorted(d for d in dirs if not d.startswith("episode-"))
                for name in names:
                    path = Path(folder, name)
                    rel = path.relative_to(self.path).as_posix()
                    if needed_for_export(rel) and path.is_file() and not path.is_symlink():
                        files[rel] = path.read_bytes()
        return TrialContent(self.name, files)


def iter_trials(root: Path) -> Iterator[TrialFiles]:
    """Trial directories directly under `root` (the flat SkyRL layout), in sorted name order.

    A trial directory holds `result.json` or `agent/` (Harbor's definition); other entries,
    such as a `.synced_from` marker, are not trials.
    """
    root = Path(root)
    if not root.is_dir():
        raise RlkeepError(f"{root}: trace root is not a directory")
    for name in sorted(entry.name for entry in os.scandir(root) if entry.is_dir()):
        trial_dir = root / name
        if (trial_dir / RESULT).is_file() or (trial_dir / "agent").is_dir():
            yield TrialFiles(name, trial_dir)


class UnsortedTar(Exception):
    """The tar's trials are not contiguous and in sorted order, so it cannot be streamed."""


class TarTrials:
    """The trials of a sync tar read in one streaming pass, without extracting anything.

    The sync step writes members in sorted order, so each trial's members are contiguous and
    trials arrive in name order (the order `iter_trials` gives for the extracted tree, which
    keeps the output identical). Every member is checked as it comes; an unsafe one refuses
    the tar (RlkeepError naming it). A tar that is not in that order raises UnsortedTar, and
    the caller extracts it instead. `sha256` is the file's digest once iteration finished.
    """

    def __init__(self, tar_path: Path):
        self.tar_path = Path(tar_path)
        self.sha256: str | None = None

    def __iter__(self) -> Iterator[TrialContent]:
        with open(self.tar_path, "rb") as raw:
            reader = _HashingReader(raw)
            try:
                with tarfile.open(fileobj=reader, mode="r|*") as tar:
                    yield from self._trials(tar)
            except tarfile.TarError as error:
                raise RlkeepError(f"{self.tar_path}: not a readable tar: {error}") from error
            while reader.read(HASH_CHUNK):  # padding after the end-of-archive blocks
                pass
        self.sha256 = reader.digest.hexdigest()

    def _trials(self, tar: tarfile.TarFile) -> Iterator[TrialContent]:
        current: str | None = None
        names: set[str] = set()
        files: dict[str, bytes] = {}
        is_trial = False
        for member in _iter_members(tar):
            reason = unsafe_member_reason(member)
            if reason:
                raise RlkeepError(f"{self.tar_path}: refusing the whole tar: member {member.name!r}: {reason}")
            rel = _member_path(member.name)
            if rel is None or (len(rel.parts) == 1 and not member.isdir()):
                continue  # the root entry, or a file beside the trials (e.g. .synced_from)
            top, inner = rel.parts[0], "/".join(rel.parts[1:])
            if top != current:
                if current is not None and top <= current:
                    raise UnsortedTar(f"member {member.name!r} comes after trial {current!r}")
                if current is not None and is_trial:
                    yield TrialContent(current, files)
                current, names, files, is_trial = top, set(), {}, False
            if not inner:
                continue
            if inner in names:
                raise RlkeepError(f"{self.tar_path}: refusing the whole tar: member {member.name!r} appears twice")
            names.add(inner)
            is_trial = is_trial or inner == RESULT or inner == "agent" or inner.startswith("agent/")
            if member.isreg() and needed_for_export(inner):
                files[inner] = _read_member(tar, member)
        if current is not None and is_trial:
            yield TrialContent(current, files)


# --------------------------------------------------------------------------- text cleaning

# Control characters other than tab and newline (ESC and CR included), as bytes: checking a
# text with bytes.translate is several times faster than a regex search, and most texts are clean.
_CONTROL_BYTES = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0d, 0x20)) + b"\x7f"
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves, bracketed paste ESC[?2004h, ESC[200~
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"   # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]+[0-~]"                 # nF escapes, e.g. charset selection ESC(B
    r"|\x1b[0-~]"                       # other two-character escapes
)
# Bracketed-paste markers whose ESC was already stripped or is shown as ^[ (longest first).
_PASTE_MARKERS = ("^[[200~", "^[[201~", "[200~", "[201~")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _overwrite_line(line: str) -> str:
    """What a terminal shows for a line with carriage returns: each segment overwrites from column 0."""
    shown = ""
    for segment in line.split("\r"):
        shown = segment + shown[len(segment):]
    return shown


def _needs_cleaning(text: str) -> bool:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return True
    return len(data.translate(None, _CONTROL_BYTES)) != len(data) or b"[20" in data


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clean_text(text: str, repairs: Counter[str] | None = None) -> str:
    """Replace lone surrogates with U+FFFD and remove terminal noise; counts go to `repairs`."""
    if not _needs_cleaning(text):
        return text
    cleaned = text
    if _has_lone_surrogate(cleaned):
        cleaned = _SURROGATE.sub("\ufffd", cleaned)
        if repairs is not None:
            repairs["lone_surrogate"] += 1
    before = cleaned
    # Each pass only when its marker is present: plain `in` scans are far cheaper than regexes.
    if "\x1b" in cleaned:
        cleaned = _ESCAPE_SEQUENCE.sub("", cleaned)
    if "[20" in cleaned:
        for marker in _PASTE_MARKERS:
            cleaned = cleaned.replace(marker, "")
    if "\r" in cleaned:
        cleaned = cleaned.replace("\r\n", "\n")
        if "\r" in cleaned:
            cleaned = "\n".join(_overwrite_line(line) if "\r" in line else line
                                for line in cleaned.split("\n"))
    if _needs_cleaning(cleaned):
        cleaned = _CONTROL.sub("", cleaned)
    if repairs is not None and cleaned != before:
        repairs["terminal_noise"] += 1
    return cleaned


# --------------------------------------------------------------------------- ATIF -> messages

class MalformedTrial(Exception):
    """A trial that cannot become rows; `reason` is the manifest key it is counted under."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# --------------------------------------------------------------------------- one trial

def _read_json(data: bytes, rel: str, reason: str, repairs: Counter[str]) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        repairs["invalid_utf8_file"] += 1
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedTrial(reason, f"{rel} line {error.lineno}: {error.msg}") from error


# The members of result.json the export reads; anything else (rollout_details, agent output:
# possibly hundreds of MB) is skipped without being decoded when the file is large.
_RESULT_MEMBERS: dict[str, Any] = {name: None for name in (
    "trial_name", "task_name", "started_at", "verifier_result", "exception_info", "agent_info", "config")}
SKIM_RESULT_ABOVE_BYTES = 4 << 20


def _read_result(data: bytes, repairs: Counter[str]) -> Any:
    """result.json as a dict of the members the export reads. A large file is skimmed (memory:
    the picked members, not about three times the file); if skimming refuses it, the full parse
    decides, with its repairs and its error message."""
    if len(data) > SKIM_RESULT_ABOVE_BYTES:
        try:
            return pick_members(data, _RESULT_MEMBERS, RESULT)
        except (SkimError, ValueError):
            pass
    return _read_json(data, RESULT, "invalid_json_result", repairs)


def _reward_text(result: dict[str, Any]) -> str | None:
    """Harbor 0.26's reward text: `verifier_result.rewards["reward"]` as `str(float(value))`, or
    the value's text when it is not a number; None when there is no such reward."""
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    value = rewards.get("reward") if isinstance(rewards, dict) else None
    if value is None:
        return None
    try:
        return str(float(value))
    except (TypeError, ValueError):
        return str(value)


def _is_success(result_text: str | None) -> bool:
    """Harbor's success rule on the `result` column: a number above zero (an exception is not)."""
    try:
        return result_text is not None and float(result_text) > 0
    except ValueError:
        return False


def _exception_type(result: dict[str, Any]) -> str | None:
    info = result.get("exception_info")
    kind = info.get("exception_type") if isinstance(info, dict) else None
    return str(kind) if kind else None


def _trajectory_doc(rel: str, data: bytes, repairs: Counter[str]) -> dict[str, Any]:
    doc = _read_json(data, rel, "invalid_json_trajectory", repairs)
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if not (isinstance(version, str) and version.startswith("ATIF-") and isinstance(doc.get("steps"), list)):
        raise MalformedTrial("not_atif", f"{rel} has no ATIF schema_version and steps list")
    for position, step in enumerate(doc["steps"]):
        if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
            raise MalformedTrial("not_atif", f"{rel} step {position + 1} has no valid source")
    return doc


@dataclass
class TrialRows:
    """A readable trial: its metadata columns and, per trace source, its contexts."""

    success: bool
    columns: dict[str, str | None]
    sources: list[tuple[str, list[Context], dict[str, str | None]]]  # (trace_source, contexts, overrides)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _run_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Harbor 0.26's run metadata from result.json (its fallbacks, in its order)."""
    config = _mapping(result.get("config"))
    agent_cfg = _mapping(config.get("agent"))
    agent_info = _mapping(result.get("agent_info"))
    model_info = _mapping(agent_info.get("model_info"))
    return {
        "agent": agent_cfg.get("name") or agent_info.get("name") or config.get("agent_name") or result.get("agent_name"),
        "model": (model_info.get("name") or agent_cfg.get("model_name") or agent_info.get("model_name")
                  or config.get("engine")),
        "model_provider": (model_info.get("provider") or agent_cfg.get("provider") or agent_info.get("provider")
                           or config.get("engine")),
        "run_id": (config.get("job_id") or config.get("job_name") or result.get("job_id") or result.get("run_id")
                   or result.get("trial_name")),
    }


class _Contexts:
    """Turns the ATIF documents of one agent (main or subagent) into contexts."""

    def __init__(self, scrub: Callable[[str], str], repairs: Counter[str]):
        self.scrub, self.repairs = scrub, repairs

    def build(self, documents: list[tuple[str, bytes]]) -> tuple[list[Context], dict[str, Any], list[dict[str, Any]]]:
        """(contexts, first file's agent block, all steps)."""
        contexts: list[Context] = []
        agent: dict[str, Any] = {}
        every: list[dict[str, Any]] = []
        episode = 0
        for index, (rel, data) in enumerate(documents):
            doc = _trajectory_doc(rel, data, self.repairs)
            file_agent = _mapping(doc.get("agent"))
            if index == 0:
                agent = file_agent
                if not doc["steps"]:
                    raise MalformedTrial("empty_steps", rel)
            definitions = file_agent.get("tool_definitions")
            tools = tools_block(definitions) if isinstance(definitions, list) and definitions else None
            context, episode = context_messages(doc["steps"], self.scrub, episode, tools=tools)
            contexts.append(context)
            every += doc["steps"]
        return contexts, agent, every


def _subagent_sources(trial: TrialContent, builder: _Contexts, repairs: Counter[str],
                      run_model: Any) -> list[tuple[str, list[Context], dict[str, str | None]]]:
    """One source per `agent/trajectory.<kind>.json` (sorted by file name), labelled `<kind>`."""
    sources = []
    for rel in sorted(trial.files):
        kind = subagent_source(rel)
        if kind is None:
            continue
        try:
            contexts, agent, _ = builder.build([(rel, trial.files[rel])])
        except MalformedTrial:
            repairs["subagent_trajectory_unreadable"] += 1
            continue
        model = agent.get("model_name") or run_model
        sources.append((kind, contexts, {"model": None if model is None else builder.scrub(str(model))}))
    return sources


def instruction_text(trial: TrialContent) -> str | None:
    """Harbor's `instruction`: in the first (by name) `agent/trajectory*.json` that is not a
    summarization, the first step whose message is a non-blank string, stripped."""
    names = sorted(rel for rel in trial.files if rel.startswith("agent/trajectory") and "/" not in rel[6:]
                   and rel.endswith(".json") and ".summarization" not in rel)
    if not names:
        return None
    try:
        steps = json.loads(trial.files[names[0]]).get("steps")
    except (ValueError, AttributeError):
        return None
    for step in steps if isinstance(steps, list) else []:
        message = step.get("message") if isinstance(step, dict) else None
        if isinstance(message, str) and message.strip():
            return message.strip()
    return None


def read_trial(trial: TrialContent, scrub: Callable[[str], str], repairs: Counter[str]) -> TrialRows:
    """Parse one trial into metadata and contexts, or raise MalformedTrial with the reason."""
    if trial.result is None:
        raise MalformedTrial("missing_result")
    result = _read_result(trial.result, repairs)
    if not isinstance(result, dict):
        raise MalformedTrial("invalid_json_result", "result.json is not an object")
    if MAIN_TRAJECTORY not in trial.files:
        raise MalformedTrial("missing_trajectory")
    builder = _Contexts(scrub, repairs)
    contexts, agent, _ = builder.build(trial.trajectories())
    if not any(m.episode is not None for c in contexts for m in c.messages):
        raise MalformedTrial("no_agent_steps")
    if contexts[0].messages[0].role == "assistant":
        raise MalformedTrial("no_user_turn")
    exception_type = _exception_type(result)
    verifier_parts = [trial.files[rel].decode("utf-8", errors="replace")
                      for rel in VERIFIER_OUTPUT if rel in trial.files]
    run = _run_metadata(result)
    trial_name = result.get("trial_name") or trial.name
    metadata = {
        # Main rows name the trajectory's agent and model; subagent rows the run's agent.
        "agent": agent.get("name") or run["agent"],
        "model": agent.get("model_name") or run["model"],
        "model_provider": run["model_provider"],
        "date": result.get("started_at"),
        "task": result.get("task_name"),
        "run_id": run["run_id"] or trial_name,  # SkyRL: job_id is null, so the trial name
        "trial_name": trial_name,
    }
    columns: dict[str, str | None] = {key: None if value is None else scrub(str(value))
                                      for key, value in metadata.items()}
    # Harbor 0.26: an exception wins over a reward (a timed-out trial that was still verified).
    columns["result"] = None if (text := exception_type or _reward_text(result)) is None else scrub(text)
    definitions = agent.get("tool_definitions")
    has_tools = isinstance(definitions, list) and bool(definitions)
    instruction = instruction_text(trial)
    columns["instruction"] = None if instruction is None else scrub(instruction)
    columns["verifier_output"] = scrub("".join(verifier_parts)) if verifier_parts else None
    columns["tool_definitions"] = scrub(json.dumps(definitions, ensure_ascii=False)) if has_tools else None
    run_agent = None if run["agent"] is None else scrub(str(run["agent"]))
    subagents = [(kind, found, dict(overrides, agent=run_agent, tool_definitions=None))
                 for kind, found, overrides in _subagent_sources(trial, builder, repairs, run["model"])]
    sources = [(MAIN_SOURCE, contexts, {})] + subagents
    return TrialRows(success=_is_success(columns["result"]), columns=columns, sources=sources)


def keep_trial(success: bool, filter: str) -> bool:
    return filter == "none" or (filter == "success") == success


# --------------------------------------------------------------------------- parquet shards

Conversation = list[tuple[str, str]]


def _turns_array(conversations: list[Conversation], type_: pa.DataType) -> pa.Array:
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for conversation in conversations:
        for key, value in conversation:
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    turns = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.string())],
                                       fields=list(type_.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), turns, type=type_)


class _RowBatch:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.sharegpt = SHAREGPT_COLUMN in schema.names
        self.conversations: list[Conversation] = []
        self.columns: dict[str, list[str | None]] = {name: [] for name in TEXT_COLUMNS}
        self.chars = 0

    def __len__(self) -> int:
        return len(self.conversations)

    def add(self, conversation: Conversation, columns: dict[str, str | None]) -> None:
        self.conversations.append(conversation)
        for name, values in self.columns.items():
            value = columns[name]
            values.append(value)
            if value:
                self.chars += len(value)
        self.chars += sum(len(content) for _, content in conversation) * (2 if self.sharegpt else 1)

    def table(self) -> pa.Table:
        arrays = []
        for name in self.schema.names:
            if name == "conversations":
                arrays.append(_turns_array(self.conversations, CONVERSATION_TYPE))
            elif name == SHAREGPT_COLUMN:
                arrays.append(_turns_array([to_sharegpt(c) for c in self.conversations], SHAREGPT_TYPE))
            else:
                arrays.append(pa.array(self.columns[name], pa.string()))
        return pa.Table.from_arrays(arrays, schema=self.schema)


class ShardWriter:
    """Writes rows into shards of `trials_per_shard` row-producing trials each, flushing a row
    group whenever the buffered text passes ROW_GROUP_CHARS. Shards are written under a part
    name and get their final `train-iiiii-of-nnnnn.parquet` names once the count is known."""

    def __init__(self, data_dir: Path, trials_per_shard: int, row_group_chars: int | None = None,
                 schema: pa.Schema = SCHEMA):
        self.data_dir = data_dir
        self.trials_per_shard = trials_per_shard
        self.row_group_chars = row_group_chars or ROW_GROUP_CHARS
        self.schema = schema
        self.shards: list[dict[str, Any]] = []
        self._parts: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._path: Path | None = None
        self._batch = _RowBatch(schema)
        self._shard_rows = 0
        self._shard_trials = 0

    def _open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._path = self.data_dir / f".part-{len(self.shards):05d}.parquet"
        self._writer = pq.ParquetWriter(self._path, self.schema, **PARQUET_OPTIONS)

    def _flush(self) -> None:
        if len(self._batch):
            if self._writer is None:
                self._open()
            assert self._writer is not None
            self._writer.write_table(self._batch.table())
            self._batch = _RowBatch(self.schema)

    def _close_shard(self) -> None:
        self._flush()
        if self._writer is None:
            return
        self._writer.close()
        assert self._path is not None
        self.shards.append({"name": self._path.name, "rows": self._shard_rows,
                            "size": self._path.stat().st_size, "sha256": sha256_file(self._path)})
        self._parts.append(self._path)
        self._writer, self._path = None, None
        self._shard_rows = self._shard_trials = 0

    def add_trial(self, rows: Iterable[tuple[Conversation, dict[str, str | None]]]) -> int:
        count = 0
        for conversation, columns in rows:
            self._batch.add(conversation, columns)
            count += 1
            if self._batch.chars >= self.row_group_chars:
                self._flush()
        if count:
            self._shard_rows += count
            self._shard_trials += 1
            if self._shard_trials >= self.trials_per_shard:
                self._close_shard()
        return count

    def abort(self) -> None:
        """Close an open shard without recording it (the caller discards the directory)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> list[dict[str, Any]]:
        self._close_shard()
        if not self.shards:  # no rows at all: one empty shard that still carries the schema
            self._open()
            self._close_shard()
            self.shards[-1]["rows"] = 0
        count = len(self.shards)
        for index, (shard, part) in enumerate(zip(self.shards, self._parts)):
            shard["name"] = SHARD_NAME.format(index=index, count=count)
            os.replace(part, self.data_dir / shard["name"])
        return self.shards


# --------------------------------------------------------------------------- the export

def replace_lone_surrogates(text: str, repairs: Counter[str] | None = None) -> str:
    """Lone surrogates cannot be written as UTF-8 (parquet text): each becomes U+FFFD. This is
    the one change made to text besides redaction when terminal-noise cleaning is off."""
    if not _has_lone_surrogate(text):
        return text
    if repairs is not None:
        repairs["lone_surrogate"] += 1
    return _SURROGATE.sub("\ufffd", text)


class _Scrubber:
    """(Optionally clean, then) redact each text once; keeps counts per repair and per redaction kind."""

    def __init__(self, redactor: TextRedactor, clean_terminal_noise: bool = False):
        self.redactor = redactor
        self.clean_terminal_noise = clean_terminal_noise
        self.repairs: Counter[str] = Counter()
        self.redactions: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        prepared = (clean_text(text, self.repairs) if self.clean_terminal_noise
                    else replace_lone_surrogates(text, self.repairs))
        redacted, findings = self.redactor.redact_text(prepared)
        for _, kind in findings:
            self.redactions[str(kind)] += 1
        return redacted


def _trial_rows(trial: TrialRows, episodes: str) -> Iterator[tuple[Conversation, dict[str, str | None]]]:
    """The main trajectory's rows, then each subagent's, labelled in trace_source."""
    for source, contexts, overrides in trial.sources:
        found = episode_conversations(contexts, episodes) if source == MAIN_SOURCE else whole_conversation(contexts)
        for episode, conversation in found:
            yield conversation, dict(trial.columns, **overrides, episode=f"episode-{episode}", trace_source=source)


def coverage_message(covered: int, result_count: int, min_coverage: float) -> str:
    ratio = covered / max(1, result_count) if result_count else 1.0
    return (f"result coverage below threshold: {covered}/{result_count} = {ratio * 100:.2f}%; "
            f"required >= {min_coverage * 100:.2f}%")


def _below_gate(covered: int, result_count: int, min_coverage: float) -> bool:
    if result_count == 0:
        return False
    return Fraction(covered, result_count) < Fraction(str(min_coverage))


def export_rows(trials: Iterable[TrialContent], data_dir: Path, *, episodes: str, filter: str,
                redactor: TextRedactor, trials_per_shard: int, clean_terminal_noise: bool = False,
                sharegpt: bool = False) -> dict[str, Any]:
    """Turn trials (in sorted name order) into shards in data_dir; return the manifest body."""
    scrub = _Scrubber(redactor, clean_terminal_noise)
    writer = ShardWriter(data_dir, trials_per_shard, schema=row_schema(sharegpt))
    malformed: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    result_count = exported = filtered_out = row_count = 0
    try:
        for content in trials:
            if content.result is not None:
                result_count += 1
            try:
                trial = read_trial(content, scrub, scrub.repairs)
            except MalformedTrial as problem:
                malformed[problem.reason] += 1
                names = examples.setdefault(problem.reason, [])
                if len(names) < MALFORMED_EXAMPLES:
                    names.append(content.name)
                continue
            if not keep_trial(trial.success, filter):
                filtered_out += 1
                continue
            rows = writer.add_trial(_trial_rows(trial, episodes))
            row_count += rows
            exported += 1 if rows else 0
        shards = writer.finish()
    except BaseException:
        writer.abort()
        raise
    covered = exported + filtered_out
    return {
        "result_count": result_count,
        "row_count": row_count,
        "result_coverage": covered / result_count if result_count else 1.0,
        "trials_exported": exported,
        "trials_filtered_out": filtered_out,
        "coverage_basis": "(trials_exported + trials_filtered_out) / result_count; trial dirs with "
                          "result.json count, rows do not (episodes=all gives several rows per trial)",
        "shards": shards,
        "malformed": dict(sorted(malformed.items())),
        "malformed_examples": {key: examples[key] for key in sorted(examples)},
        "filter": filter,
        "filter_rule": FILTER_RULES[filter],
        "episodes": episodes,
        "columns": column_names(sharegpt),
        "text_changes": {
            "credentials_redacted": True,
            "lone_surrogates_replaced": True,
            "terminal_noise_cleaned": clean_terminal_noise,
        },
        "trials_per_shard": trials_per_shard,
        "redactions": dict(sorted(scrub.redactions.items())),
        "repairs": dict(sorted(scrub.repairs.items())),
    }


def _environment_redactor() -> TextRedactor:
    return redactor_from_environment()


def _clear_stale_work_dirs(out_dir: Path) -> None:
    for stale in out_dir.parent.glob(f".{out_dir.name}.build-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


# Our shard names: Harbor's `train-iiiii-of-nnnnn.parquet`, and `train-NNNNN.parquet` of exports
# before rlkeep 0.x wrote Harbor's names (replaced like any stale shard of ours).
SHARD_PATTERN = re.compile(r"train-\d+(?:-of-\d+)?\.parquet")


def _our_shards(data_dir: Path) -> list[Path]:
    """The shard files an earlier export wrote (data/train-*.parquet): with our card, the only files in the
    stage folder an export replaces or withdraws. Anything else there is the operator's and stays."""
    if not data_dir.is_dir() or data_dir.is_symlink():
        return []
    return sorted(path for path in data_dir.iterdir() if SHARD_PATTERN.fullmatch(path.name))


def check_stage_folder(out_dir: Path) -> None:
    """Stop before building when something that is not ours sits where the export writes: a
    non-folder at out_dir or data/, or a folder or link named like a shard or the manifest."""
    problems = []
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        problems.append(f"{out_dir} is not a folder")
    else:
        data_dir = out_dir / DATA_DIR
        if data_dir.is_symlink() or (data_dir.exists() and not data_dir.is_dir()):
            problems.append(f"{data_dir} is not a folder")
        for name in (MANIFEST_NAME, REJECTED_MANIFEST_NAME):
            path = out_dir / name
            if path.is_symlink() or (path.exists() and not path.is_file()):
                problems.append(f"{path} is not a regular file")
        problems += [f"{path} is not a regular file" for path in _our_shards(data_dir)
                     if path.is_symlink() or not path.is_file()]
    if problems:
        raise RlkeepError(f"trace export into {out_dir}: {'; '.join(problems)}; the export replaces only its own "
                          "data/train-*.parquet shards and manifest, so it leaves this as it is: move it aside and rerun")


def foreign_files(out_dir: Path) -> list[str]:
    """Files in the stage folder that this export did not write (kept as they were)."""
    out_dir = Path(out_dir)
    ours = {MANIFEST_NAME, REJECTED_MANIFEST_NAME} | {f"{DATA_DIR}/{p.name}" for p in _our_shards(out_dir / DATA_DIR)}
    if _card_is_ours(out_dir / CARD_NAME):
        ours.add(CARD_NAME)
    return sorted(rel for rel in (p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if not p.is_dir())
                  if rel not in ours)


def _card_is_ours(path: Path) -> bool:
    """A README.md this export wrote (it carries the marker); anything else there is the operator's."""
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, "rb") as handle:
        return CARD_MARKER.encode() in handle.read(4096)


def _install(work: Path, out_dir: Path) -> None:
    """Put the built shards and manifest into out_dir, replacing only our earlier shards. The
    manifest is the completion marker: it goes first on the way out and last on the way in."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    (out_dir / REJECTED_MANIFEST_NAME).unlink(missing_ok=True)
    data_dir = out_dir / DATA_DIR
    data_dir.mkdir(exist_ok=True)
    for stale in _our_shards(data_dir):
        stale.unlink()
    for shard in sorted((work / DATA_DIR).iterdir()):
        os.replace(shard, data_dir / shard.name)
    card = out_dir / CARD_NAME
    if (work / CARD_NAME).is_file() and (not card.exists() or _card_is_ours(card)):
        os.replace(work / CARD_NAME, card)
    os.replace(work / MANIFEST_NAME, out_dir / MANIFEST_NAME)


def _reject(out_dir: Path, manifest: dict[str, Any], message: str) -> None:
    """A build under the gate: the previous export's shards are withdrawn (they describe other
    input) and the rejected manifest is kept beside them for inspection; other files stay."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    data_dir = out_dir / DATA_DIR
    for stale in _our_shards(data_dir):
        stale.unlink()
    if _card_is_ours(out_dir / CARD_NAME):
        (out_dir / CARD_NAME).unlink()
    if data_dir.is_dir() and not data_dir.is_symlink() and not any(data_dir.iterdir()):
        data_dir.rmdir()  # the folder our shards were in; kept when anything else is inside
    write_json(out_dir / REJECTED_MANIFEST_NAME, dict(manifest, status="rejected", reason=message))


def _export_tar(tar_path: Path, work: Path, options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Stream the tar; if its trials are out of order, extract it safely and read the tree."""
    trials = TarTrials(tar_path)
    try:
        manifest = export_rows(trials, work / DATA_DIR, **options)
        assert trials.sha256 is not None
        return manifest, trials.sha256
    except UnsortedTar:
        shutil.rmtree(work / DATA_DIR, ignore_errors=True)
    root = work / "source"
    _, digest = _safe_extract(tar_path, root, _needed_below_trial)
    return export_rows((trial.read() for trial in iter_trials(root)), work / DATA_DIR, **options), digest


def _needed_below_trial(rel: str) -> bool:
    top, _, inner = rel.partition("/")
    return bool(inner) and needed_for_export(inner)


def build_trace_dataset(source: Path, out_dir: Path, *, episodes: str = "last", filter: str = "none",
                        redactor: TextRedactor | None = None, min_coverage: float = DEFAULT_MIN_COVERAGE,
                        trials_per_shard: int = DEFAULT_TRIALS_PER_SHARD,
                        source_sha256: str | None = None, clean_terminal_noise: bool = False,
                        sharegpt: bool = False, card: CardInfo | None = None) -> dict[str, Any]:
    """Build out_dir/data/train-*.parquet and out_dir/trace_export_manifest.json; return the manifest.

    source: the sync step's tar (streamed; extracted safely into a work dir when its members
    are not in sorted order) or an extracted trace root.
    source_sha256: for a tar, the digest the sync manifest recorded (checked); for a
    directory, recorded as the source's identity. redactor: None uses
    `rlkeep.redaction.redactor_from_environment()`. The build happens in a sibling work dir;
    only a build that passes the coverage gate replaces out_dir's data/ and manifest, and writes
    the dataset card README.md (unless an operator's README.md sits there: it is kept).
    clean_terminal_noise: off by default (Harbor keeps the text the model saw); recorded in the
    manifest and the card. sharegpt: add the conversations_sharegpt column.
    Raises CoverageError (an RlkeepError) under the gate, RlkeepError on unreadable input.
    """
    if episodes not in EPISODES:
        raise RlkeepError(f"episodes must be one of {', '.join(EPISODES)}, not {episodes!r}")
    if filter not in FILTERS:
        raise RlkeepError(f"filter must be one of {', '.join(FILTERS)}, not {filter!r}")
    if not 0.0 <= min_coverage <= 1.0:
        raise RlkeepError(f"min_coverage must lie in [0, 1], not {min_coverage!r}")
    if trials_per_shard < 1:
        raise RlkeepError(f"trials_per_shard must be at least 1, not {trials_per_shard!r}")
    source, out_dir = Path(source), Path(out_dir).absolute()
    if not source.exists():
        raise RlkeepError(f"{source}: trace source does not exist")
    check_stage_folder(out_dir)
    redactor = redactor if redactor is not None else _environment_redactor()
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _clear_stale_work_dirs(out_dir)
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
    except OSError as error:
        raise RlkeepError(f"{out_dir}: cannot create the build directory beside it: {error}") from error
    try:
        options = dict(episodes=episodes, filter=filter, redactor=redactor, trials_per_shard=trials_per_shard,
                       clean_terminal_noise=clean_terminal_noise, sharegpt=sharegpt)
        if source.is_file():
            manifest, digest = _export_tar(source, work, options)
            if source_sha256 and source_sha256 != digest:
                raise RlkeepError(f"{source}: sha256 {digest} differs from the expected {source_sha256}")
            manifest["source"] = {"kind": "tar", "name": source.name, "sha256": digest}
        else:
            manifest = export_rows((trial.read() for trial in iter_trials(source)), work / DATA_DIR, **options)
            manifest["source"] = {"kind": "directory", "sha256": source_sha256}
        manifest["min_coverage"] = min_coverage
        covered = manifest["trials_exported"] + manifest["trials_filtered_out"]
        if _below_gate(covered, manifest["result_count"], min_coverage):
            message = coverage_message(covered, manifest["result_count"], min_coverage)
            _reject(out_dir, manifest, message)
            raise CoverageError(message, manifest)
        existing = out_dir / CARD_NAME
        if existing.exists() and not _card_is_ours(existing):
            manifest["card"] = {"written": False, "reason": f"{CARD_NAME} in the stage folder is not ours; kept"}
        else:
            manifest["card"] = {"written": True, "name": CARD_NAME}
            text = render_card(manifest, card or CardInfo(), data_dir=DATA_DIR, manifest_name=MANIFEST_NAME)
            (work / CARD_NAME).write_text(text, encoding="utf-8")
        write_json(work / MANIFEST_NAME, manifest)
        _install(work, out_dir)
        return manifest
    except OSError as error:  # unreadable source file, full disk, permissions: name the path
        raise RlkeepError(f"trace export from {source} into {out_dir} failed: {error}") from error
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- CLI


def _coverage_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1]: {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlkeep traces-dataset",
        description="Rebuild the trace dataset from a trace tree (or the sync step's tar), gate it "
                    "on result coverage, and stage it locally or replace the Hub dataset's shards "
                    "in one commit.")
    parser.add_argument("--job-dir", required=True, type=Path,
                        help="extracted trace root (trial folders directly inside) or trace_jobs.tar")
    parser.add_argument("--repo-id", required=True, help="Hub dataset ORG/NAME")
    parser.add_argument("--episodes", choices=EPISODES, default="last")
    parser.add_argument("--filter", choices=FILTERS, default="none",
                        help="success: reward > 0; failure: the rest (default: none)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--single-commit", action="store_true",
                      help="stage in a temp dir, then replace the remote shard set in one commit "
                           "and verify it (the default when --stage-only is not given)")
    mode.add_argument("--stage-only", type=Path, metavar="DIR",
                      help="write the staged tree to DIR and stop; nothing goes to the Hub")
    parser.add_argument("--min-coverage", type=_coverage_arg, default=DEFAULT_MIN_COVERAGE)
    parser.add_argument("--source-sha256", help="expected sha256 of the tar (from the sync manifest)")
    parser.add_argument("--trials-per-shard", type=int, default=DEFAULT_TRIALS_PER_SHARD)
    parser.add_argument("--sharegpt", action="store_true",
                        help="add the conversations_sharegpt column (from: system/human/gpt, value)")
    parser.add_argument("--clean-terminal-noise", action="store_true",
                        help="strip ANSI codes, paste markers and carriage-return overwrites (off by default: "
                             "rows keep the text the model saw); recorded in the manifest and the card")
    parser.add_argument("--job", help="the run's job name, for the dataset card")
    parser.add_argument("--model-repo", help="the policy's Hub model repo ORG/NAME, linked from the dataset card")
    visibility = parser.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True,
                            help="create the dataset private if it does not exist (default)")
    visibility.add_argument("--public", dest="private", action="store_false")
    return parser


def _summary(manifest: dict[str, Any]) -> dict[str, Any]:
    keys = ("result_count", "row_count", "result_coverage", "malformed", "redactions", "episodes", "filter",
            "text_changes")
    return {key: manifest[key] for key in keys} | {"shards": [shard["name"] for shard in manifest["shards"]]}


def _publish(stage: Path, repo_id: str, *, private: bool, manifest: dict[str, Any]) -> dict[str, Any]:
    publication = replace_trace_shards(
        stage, repo_id, private=private, endpoint=None, token=None,
        commit_message=f"Replace trace export with {manifest['row_count']} rows")
    verification = verify_trace_publication(stage, repo_id, publication["commit"])
    return {"publication": publication, "verification": verification}


def cli_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not REPO_ID_RE.match(args.repo_id):
        raise RlkeepError(f"--repo-id must be ORG/NAME, not {args.repo_id!r}")
    if args.trials_per_shard < 1:
        raise RlkeepError("--trials-per-shard must be at least 1")
    if args.model_repo is not None and not REPO_ID_RE.match(args.model_repo):
        raise RlkeepError(f"--model-repo must be ORG/NAME, not {args.model_repo!r}")
    options = dict(episodes=args.episodes, filter=args.filter, min_coverage=args.min_coverage,
                   trials_per_shard=args.trials_per_shard, source_sha256=args.source_sha256,
                   clean_terminal_noise=args.clean_terminal_noise, sharegpt=args.sharegpt,
                   card=CardInfo(job=args.job, dataset_repo=args.repo_id, model_repo=args.model_repo))
    if args.stage_only is not None:
        manifest = build_trace_dataset(args.job_dir, args.stage_only, **options)
        kept = foreign_files(args.stage_only)
        if kept:
            print(f"rlkeep: kept {len(kept)} file(s) in {args.stage_only} that this export did not write: "
                  f"{', '.join(kept[:10])}{' ...' if len(kept) > 10 else ''}", file=sys.stderr)
        print(dumps({"status": "staged", "stage": str(args.stage_only), "repo_id": args.repo_id,
                     **_summary(manifest), "kept_files": kept}), end="")
        return 0
    stage_root = Path(tempfile.mkdtemp(prefix="rlkeep-traces-"))
    stage = stage_root / "traces"
    verified = False
    try:
        manifest = build_trace_dataset(args.job_dir, stage, **options)
        outcome = _publish(stage, args.repo_id, private=args.private, manifest=manifest)
        verified = True
    except RlkeepError as error:
        if (stage / MANIFEST_NAME).is_file():
            raise RlkeepError(f"{error} (staged export kept at {stage})") from error
        raise
    finally:
        # Staging is kept until the remote copy verified, so a failed publication can be inspected.
        if verified or not (stage / MANIFEST_NAME).is_file():
            shutil.rmtree(stage_root, ignore_errors=True)
    print(dumps({"status": "published", "repo_id": args.repo_id, **_summary(manifest), **outcome}), end="")
    return 0


# --------------------------------------------------------------------------- pipeline step


def _flag(settings: dict[str, Any], key: str) -> bool:
    value = settings.get(key, False)
    if not isinstance(value, bool):
        raise RlkeepError(f"config traces.{key} must be true or false, not {value!r}")
    return value


def stage_traces_step(ctx: StepContext) -> None:
    """`<job>/stage/traces/`: the dataset rebuilt from the full synced tree (never a monitor sample),
    gated on coverage before anything can be uploaded."""

    sync_manifest = read_json(ctx.inputs["manifest"])
    settings = ctx.settings
    publish = ctx.record.publish or {}
    card = CardInfo(job=ctx.job, dataset_repo=publish.get("traces"), model_repo=publish.get("model"))
    manifest = build_trace_dataset(
        ctx.inputs["tar"], ctx.outputs["stage"],
        episodes=str(settings.get("episodes", "last")),
        filter=str(settings.get("filter", "none")),
        min_coverage=float(settings.get("min_coverage", DEFAULT_MIN_COVERAGE)),
        trials_per_shard=int(settings.get("trials_per_shard", DEFAULT_TRIALS_PER_SHARD)),
        source_sha256=sync_manifest["sha256"],
        clean_terminal_noise=_flag(settings, "clean_terminal_noise"),
        sharegpt=_flag(settings, "sharegpt"),
        card=card,
    )
    import logging

    logging.getLogger(__name__).info(
        "trace dataset: %s rows from %s result.json files (coverage %.4f), %d shards",
        manifest.get("row_count"), manifest.get("result_count"), manifest.get("result_coverage", 0.0),
        len(manifest.get("shards", [])))
