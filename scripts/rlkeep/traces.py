"""Trace dataset: rebuild from the full trace tree, shard deterministically, gate on coverage.

Input is the sync step's `trace_jobs.tar` (member names relative to the trace root, e.g.
`<trial>/result.json`) or an already extracted trace root. Every trial directory is read:
`result.json`, the ATIF `agent/trajectory.json` with its `trajectory.cont-N.json`
continuations, and `verifier/test-stdout.txt` + `test-stderr.txt`. Rows follow the Harbor
trace-export columns (see `COLUMNS`); shards are `data/train-NNNNN.parquet` next to
`trace_export_manifest.json`.

Decisions worth knowing (the manifest states the ones a reader of the data needs):
- Trial order is the sorted trial directory name; shard k holds the rows of the k-th group of
  `trials_per_shard` trials that produced rows, so the index advances only for non-empty
  shards. Same input, same options and same pyarrow version give the same bytes: fixed
  schema, fixed writer options, no timestamps.
- `result` is a string: the reward (`str(float(reward))`, e.g. "1.0") when
  `verifier_result.rewards` has one, else the exception type, else null. result.json is the
  record of the reward (SkyRL reads the same field); verifier/reward.* files are not consulted.
- `filter="success"` keeps trials with reward > 0 (partial credit counts; for 0/1 rewards
  this equals reward == 1); `"failure"` keeps the rest, exceptions and missing rewards included.
- Episodes: one episode per agent step that is not copied context. Steps are taken from
  trajectory.json then each continuation in numeric order; `is_copied_context` steps repeat
  earlier context and are dropped, so a conversation never repeats itself. `last` gives one
  row with the whole conversation (episode = the last one); `all` gives one row per episode
  with the conversation up to and including that agent turn.
- Conversations start with `user` and alternate: system steps become user text (so a system
  prompt is folded into the first user turn), consecutive same-role messages are joined with
  a blank line, an observation is a user turn unless it follows the final agent step of the
  row. Agent turns render as `<think>{reasoning}</think>\\n{message}` then one
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` block per call. A
  trajectory whose first message is an agent turn is counted as malformed (`no_user_turn`)
  rather than given an invented prompt.
- `instruction` is the message of the first `user` step of the trajectory (Terminus-2 puts
  its prompt and the task there); the task folder itself is not part of a trial.
- Text is cleaned (lone surrogates -> U+FFFD, ANSI/OSC escapes, bracketed-paste markers,
  carriage-return overwrites resolved as a terminal would, other control characters) and then
  passed through the redactor; only counts per kind reach the manifest.
- Coverage = (trials with at least one row + trials excluded by the filter) / trial dirs with
  result.json, 1.0 when there are none. With episodes=last and filter=none this equals
  row_count / result_count; with episodes=all row_count can exceed result_count, so trials
  are counted, not rows.
  A trial excluded by the filter was read correctly, so it does not count against coverage.
  Malformed trials are counted by reason; `missing_result` (agent/ without result.json: the
  trial never finished) is reported but is not part of result_count.
- Output: the build happens in a sibling work dir `.<out>.build-*`; a passing build replaces
  out_dir/data/ as a whole (stale shards go with it) and then writes the manifest, which is
  the completion marker. A build under the coverage gate withdraws the previous data/ and
  manifest and leaves `trace_export_manifest.rejected.json` for inspection.
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
from rlkeep.jsonio import dumps, write_json
from rlkeep.jsonskim import SkimError, pick_members

EPISODES = ("last", "all")
FILTERS = ("none", "success", "failure")
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

CONVERSATION_TYPE = pa.list_(pa.struct([
    pa.field("role", pa.string(), nullable=False),
    pa.field("content", pa.string(), nullable=False),
]))
COLUMNS = ("conversations", "agent", "model", "model_provider", "date", "task", "episode",
           "run_id", "trial_name", "result", "instruction", "verifier_output")
SCHEMA = pa.schema([pa.field("conversations", CONVERSATION_TYPE, nullable=False)]
                   + [pa.field(name, pa.string()) for name in COLUMNS[1:]])
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
    """Whether the export reads this path (relative to the trial dir); panes, recordings,
    logs and configs are never read."""
    return (rel == RESULT or rel in VERIFIER_OUTPUT
            or (rel.startswith("agent/trajectory") and rel.endswith(".json") and rel.count("/") == 1))


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
            for entry in os.scandir(agent):
                rel = f"agent/{entry.name}"
                if needed_for_export(rel) and entry.is_file():
                    files[rel] = Path(entry.path).read_bytes()
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


def _content_text(value: Any) -> str:
    """ATIF message / observation content: a string, or (v1.6+) a list of content parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        pieces = []
        for part in value:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'content')}]")
        return "\n".join(pieces)
    return json.dumps(value, ensure_ascii=False)


def render_agent_turn(step: dict[str, Any]) -> str:
    """`<think>{reasoning}</think>\\n{message}` plus one <tool_call> block per call."""
    message = _content_text(step.get("message"))
    reasoning = _content_text(step.get("reasoning_content"))
    if "</think>" in message and "<think>" not in message and not reasoning:
        message = "<think>" + message  # the chat template opened the think block in the prompt
    pieces = [f"<think>{reasoning}</think>\n{message}" if reasoning else message]
    for call in step.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        payload = {"name": call.get("function_name"), "arguments": call.get("arguments")}
        pieces.append("<tool_call>\n" + json.dumps(payload, ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(piece for piece in pieces if piece)


def _subagent_label(ref: Any) -> str:
    """A subagent's trajectory is not inlined (it lives in another file); it is named in place."""
    refs = ref if isinstance(ref, list) else [ref]
    labels = []
    for item in refs:
        if isinstance(item, str):
            labels.append(item)
        elif isinstance(item, dict):
            labels.append(next((str(item[key]) for key in ("trajectory_path", "session_id", "trajectory_id")
                                if item.get(key)), "subagent"))
    return ", ".join(labels) or "subagent"


def observation_text(step: dict[str, Any]) -> str:
    observation = step.get("observation")
    if not isinstance(observation, dict):
        return ""
    pieces = []
    for result in observation.get("results") or []:
        if not isinstance(result, dict):
            continue
        content = _content_text(result.get("content"))
        ref = result.get("subagent_trajectory_ref")
        if ref:
            content = f"[subagent:{_subagent_label(ref)}]" + (f"\n{content}" if content else "")
        if content:
            pieces.append(content)
    return "\n".join(pieces)


@dataclass(frozen=True)
class Message:
    role: str  # "user" or "assistant"
    source: str  # the ATIF step source ("system", "user", "agent"), or "observation"
    content: str
    episode: int | None  # the episode an assistant message ends; None for user messages


def trajectory_messages(steps: Iterable[dict[str, Any]], scrub: Callable[[str], str]) -> list[Message]:
    """Messages in order, each scrubbed once; episodes are numbered from 0 over agent steps."""
    messages: list[Message] = []
    episode = 0
    for step in steps:
        if step.get("is_copied_context"):
            continue
        if step["source"] == "agent":
            messages.append(Message("assistant", "agent", scrub(render_agent_turn(step)), episode))
            episode += 1
            observed = observation_text(step)
            if observed:
                messages.append(Message("user", "observation", scrub(observed), None))
        else:  # user and system steps are both prompt text
            messages.append(Message("user", step["source"], scrub(_content_text(step.get("message"))), None))
    return messages


def episode_conversations(messages: list[Message], episodes: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(episode, conversation) pairs: merged, alternating, starting with user, ending with the
    episode's agent turn. `last` yields only the final episode."""
    final_episode = max((m.episode for m in messages if m.episode is not None), default=None)
    if final_episode is None:
        return
    merged: list[tuple[str, str]] = []
    for message in messages:
        if merged and merged[-1][0] == message.role:
            merged[-1] = (message.role, merged[-1][1] + "\n\n" + message.content)
        else:
            merged.append((message.role, message.content))
        if message.episode is None:
            continue
        if episodes == "all" or message.episode == final_episode:
            yield message.episode, list(merged)
        if message.episode == final_episode:
            return


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


def _reward(result: dict[str, Any]) -> float | None:
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    if not isinstance(rewards, dict):
        return None
    value = rewards.get("reward")
    if value is None and len(rewards) == 1:
        value = next(iter(rewards.values()))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _exception_type(result: dict[str, Any]) -> str | None:
    info = result.get("exception_info")
    kind = info.get("exception_type") if isinstance(info, dict) else None
    return str(kind) if kind else None


def _trajectory_steps(documents: list[tuple[str, bytes]],
                      repairs: Counter[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """All steps of trajectory.json then its continuations, and the first file's agent block."""
    steps: list[dict[str, Any]] = []
    agent: dict[str, Any] = {}
    for index, (rel, data) in enumerate(documents):
        doc = _read_json(data, rel, "invalid_json_trajectory", repairs)
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if not (isinstance(version, str) and version.startswith("ATIF-") and isinstance(doc.get("steps"), list)):
            raise MalformedTrial("not_atif", f"{rel} has no ATIF schema_version and steps list")
        if index == 0:
            agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
            if not doc["steps"]:
                raise MalformedTrial("empty_steps", rel)
        for position, step in enumerate(doc["steps"]):
            if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
                raise MalformedTrial("not_atif", f"{rel} step {position + 1} has no valid source")
            steps.append(step)
    return steps, agent


@dataclass
class TrialRows:
    """A readable trial: its metadata columns and its scrubbed messages."""

    reward: float | None
    columns: dict[str, str | None]
    messages: list[Message]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _model_columns(result: dict[str, Any], agent: dict[str, Any]) -> tuple[Any, Any]:
    """(model, provider): agent_info.model_info when Harbor recorded it, else split from the
    model name SkyRL injects ("hosted_vllm/<served>")."""
    model_info = _mapping(_mapping(result.get("agent_info")).get("model_info"))
    model_name = agent.get("model_name") or _mapping(_mapping(result.get("config")).get("agent")).get("model_name")
    provider, _, bare = str(model_name or "").rpartition("/")
    return model_info.get("name") or bare or None, model_info.get("provider") or provider or None


def read_trial(trial: TrialContent, scrub: Callable[[str], str], repairs: Counter[str]) -> TrialRows:
    """Parse one trial into metadata and messages, or raise MalformedTrial with the reason."""
    if trial.result is None:
        raise MalformedTrial("missing_result")
    result = _read_result(trial.result, repairs)
    if not isinstance(result, dict):
        raise MalformedTrial("invalid_json_result", "result.json is not an object")
    if MAIN_TRAJECTORY not in trial.files:
        raise MalformedTrial("missing_trajectory")
    steps, agent = _trajectory_steps(trial.trajectories(), repairs)
    messages = trajectory_messages(steps, scrub)
    if not any(m.episode is not None for m in messages):
        raise MalformedTrial("no_agent_steps")
    if messages[0].role != "user":
        raise MalformedTrial("no_user_turn")
    reward = _reward(result)
    exception_type = _exception_type(result)
    verifier_parts = [trial.files[rel].decode("utf-8", errors="replace")
                      for rel in VERIFIER_OUTPUT if rel in trial.files]
    verifier_text = "\n".join(part for part in verifier_parts if part)
    model, provider = _model_columns(result, agent)
    trial_name = result.get("trial_name") or trial.name
    metadata = {
        "agent": agent.get("name") or _mapping(result.get("agent_info")).get("name"),
        "model": model,
        "model_provider": provider,
        "date": result.get("started_at"),
        "task": result.get("task_name"),
        "run_id": _mapping(result.get("config")).get("job_id") or trial_name,  # SkyRL: job_id is null
        "trial_name": trial_name,
    }
    columns: dict[str, str | None] = {key: None if value is None else scrub(str(value))
                                      for key, value in metadata.items()}
    columns["result"] = str(reward) if reward is not None else exception_type
    columns["instruction"] = next((m.content for m in messages if m.source == "user"), None)
    columns["verifier_output"] = scrub(verifier_text) if verifier_parts else None
    return TrialRows(reward=reward, columns=columns, messages=messages)


def keep_trial(reward: float | None, filter: str) -> bool:
    success = reward is not None and reward > 0
    return filter == "none" or (filter == "success") == success


# --------------------------------------------------------------------------- parquet shards

def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _RowBatch:
    def __init__(self) -> None:
        self.conversations: list[list[tuple[str, str]]] = []
        self.columns: dict[str, list[str | None]] = {name: [] for name in COLUMNS[1:]}
        self.chars = 0

    def __len__(self) -> int:
        return len(self.conversations)

    def add(self, conversation: list[tuple[str, str]], columns: dict[str, str | None]) -> None:
        self.conversations.append(conversation)
        for name, values in self.columns.items():
            value = columns[name]
            values.append(value)
            if value:
                self.chars += len(value)
        self.chars += sum(len(content) for _, content in conversation)

    def table(self) -> pa.Table:
        offsets = [0]
        roles: list[str] = []
        contents: list[str] = []
        for conversation in self.conversations:
            for role, content in conversation:
                roles.append(role)
                contents.append(content)
            offsets.append(len(roles))
        turns = pa.StructArray.from_arrays(
            [pa.array(roles, pa.string()), pa.array(contents, pa.string())],
            fields=list(CONVERSATION_TYPE.value_type))
        conversations = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), turns, type=CONVERSATION_TYPE)
        arrays = [conversations] + [pa.array(self.columns[name], pa.string()) for name in COLUMNS[1:]]
        return pa.Table.from_arrays(arrays, schema=SCHEMA)


class ShardWriter:
    """Writes rows into data/train-NNNNN.parquet, `trials_per_shard` row-producing trials each,
    flushing a row group whenever the buffered text passes ROW_GROUP_CHARS."""

    def __init__(self, data_dir: Path, trials_per_shard: int, row_group_chars: int | None = None):
        self.data_dir = data_dir
        self.trials_per_shard = trials_per_shard
        self.row_group_chars = row_group_chars or ROW_GROUP_CHARS
        self.shards: list[dict[str, Any]] = []
        self._writer: pq.ParquetWriter | None = None
        self._path: Path | None = None
        self._batch = _RowBatch()
        self._shard_rows = 0
        self._shard_trials = 0

    def _open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._path = self.data_dir / f"train-{len(self.shards):05d}.parquet"
        self._writer = pq.ParquetWriter(self._path, SCHEMA, **PARQUET_OPTIONS)

    def _flush(self) -> None:
        if len(self._batch):
            if self._writer is None:
                self._open()
            assert self._writer is not None
            self._writer.write_table(self._batch.table())
            self._batch = _RowBatch()

    def _close_shard(self) -> None:
        self._flush()
        if self._writer is None:
            return
        self._writer.close()
        assert self._path is not None
        self.shards.append({"name": self._path.name, "rows": self._shard_rows,
                            "size": self._path.stat().st_size, "sha256": file_sha256(self._path)})
        self._writer, self._path = None, None
        self._shard_rows = self._shard_trials = 0

    def add_trial(self, rows: Iterable[tuple[list[tuple[str, str]], dict[str, str | None]]]) -> int:
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
        return self.shards


# --------------------------------------------------------------------------- the export

class _Scrubber:
    """Clean then redact each text once; keeps counts per repair and per redaction kind."""

    def __init__(self, redactor: TextRedactor):
        self.redactor = redactor
        self.repairs: Counter[str] = Counter()
        self.redactions: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        redacted, findings = self.redactor.redact_text(clean_text(text, self.repairs))
        for _, kind in findings:
            self.redactions[str(kind)] += 1
        return redacted


def _trial_rows(trial: TrialRows, episodes: str) -> Iterator[tuple[list[tuple[str, str]], dict[str, str | None]]]:
    for episode, conversation in episode_conversations(trial.messages, episodes):
        yield conversation, dict(trial.columns, episode=f"episode-{episode}")


def coverage_message(covered: int, result_count: int, min_coverage: float) -> str:
    ratio = covered / max(1, result_count) if result_count else 1.0
    return (f"result coverage below threshold: {covered}/{result_count} = {ratio * 100:.2f}%; "
            f"required >= {min_coverage * 100:.2f}%")


def _below_gate(covered: int, result_count: int, min_coverage: float) -> bool:
    if result_count == 0:
        return False
    return Fraction(covered, result_count) < Fraction(str(min_coverage))


def export_rows(trials: Iterable[TrialContent], data_dir: Path, *, episodes: str, filter: str,
                redactor: TextRedactor, trials_per_shard: int) -> dict[str, Any]:
    """Turn trials (in sorted name order) into shards in data_dir; return the manifest body."""
    scrub = _Scrubber(redactor)
    writer = ShardWriter(data_dir, trials_per_shard)
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
            if not keep_trial(trial.reward, filter):
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
        "filter_rule": {"none": "every readable trial", "success": "reward > 0",
                        "failure": "reward missing or <= 0 (exceptions included)"}[filter],
        "episodes": episodes,
        "trials_per_shard": trials_per_shard,
        "redactions": dict(sorted(scrub.redactions.items())),
        "repairs": dict(sorted(scrub.repairs.items())),
    }


def _environment_redactor() -> TextRedactor:
    from rlkeep.redaction import redactor_from_environment
    return redactor_from_environment()


def _clear_stale_work_dirs(out_dir: Path) -> None:
    for stale in out_dir.parent.glob(f".{out_dir.name}.build-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


SHARD_PATTERN = re.compile(r"train-\d+\.parquet")


def _our_shards(data_dir: Path) -> list[Path]:
    """The shard files an earlier export wrote (data/train-NNNNN.parquet): the only files in the
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
    return sorted(rel for rel in (p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if not p.is_dir())
                  if rel not in ours)


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
    os.replace(work / MANIFEST_NAME, out_dir / MANIFEST_NAME)


def _reject(out_dir: Path, manifest: dict[str, Any], message: str) -> None:
    """A build under the gate: the previous export's shards are withdrawn (they describe other
    input) and the rejected manifest is kept beside them for inspection; other files stay."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    data_dir = out_dir / DATA_DIR
    for stale in _our_shards(data_dir):
        stale.unlink()
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
                        source_sha256: str | None = None) -> dict[str, Any]:
    """Build out_dir/data/train-*.parquet and out_dir/trace_export_manifest.json; return the manifest.

    source: the sync step's tar (streamed; extracted safely into a work dir when its members
    are not in sorted order) or an extracted trace root.
    source_sha256: for a tar, the digest the sync manifest recorded (checked); for a
    directory, recorded as the source's identity. redactor: None uses
    `rlkeep.redaction.redactor_from_environment()`. The build happens in a sibling work dir;
    only a build that passes the coverage gate replaces out_dir's data/ and manifest.
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
        options = dict(episodes=episodes, filter=filter, redactor=redactor, trials_per_shard=trials_per_shard)
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
        write_json(work / MANIFEST_NAME, manifest)
        _install(work, out_dir)
        return manifest
    except OSError as error:  # unreadable source file, full disk, permissions: name the path
        raise RlkeepError(f"trace export from {source} into {out_dir} failed: {error}") from error
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- CLI

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


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
    visibility = parser.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True,
                            help="create the dataset private if it does not exist (default)")
    visibility.add_argument("--public", dest="private", action="store_false")
    return parser


def _summary(manifest: dict[str, Any]) -> dict[str, Any]:
    keys = ("result_count", "row_count", "result_coverage", "malformed", "redactions", "episodes", "filter")
    return {key: manifest[key] for key in keys} | {"shards": [shard["name"] for shard in manifest["shards"]]}


def _publish(stage: Path, repo_id: str, *, private: bool, manifest: dict[str, Any]) -> dict[str, Any]:
    from rlkeep.hub import replace_trace_shards, verify_trace_publication

    publication = replace_trace_shards(
        stage, repo_id, private=private, endpoint=None, token=None,
        commit_message=f"Replace trace export with {manifest['row_count']} rows")
    verification = verify_trace_publication(stage, repo_id, publication["commit"])
    return {"publication": publication, "verification": verification}


def cli_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not _REPO_ID.match(args.repo_id):
        raise RlkeepError(f"--repo-id must be ORG/NAME, not {args.repo_id!r}")
    if args.trials_per_shard < 1:
        raise RlkeepError("--trials-per-shard must be at least 1")
    options = dict(episodes=args.episodes, filter=args.filter, min_coverage=args.min_coverage,
                   trials_per_shard=args.trials_per_shard, source_sha256=args.source_sha256)
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


def stage_traces_step(ctx: Any) -> None:
    """`<job>/stage/traces/`: the dataset rebuilt from the full synced tree (never a monitor sample),
    gated on coverage before anything can be uploaded."""
    from rlkeep.jsonio import read_json

    sync_manifest = read_json(ctx.inputs["manifest"])
    settings = ctx.settings
    manifest = build_trace_dataset(
        ctx.inputs["tar"], ctx.outputs["stage"],
        episodes=str(settings.get("episodes", "last")),
        filter=str(settings.get("filter", "none")),
        min_coverage=float(settings.get("min_coverage", DEFAULT_MIN_COVERAGE)),
        trials_per_shard=int(settings.get("trials_per_shard", DEFAULT_TRIALS_PER_SHARD)),
        source_sha256=sync_manifest["sha256"],
    )
    import logging

    logging.getLogger(__name__).info(
        "trace dataset: %s rows from %s result.json files (coverage %.4f), %d shards",
        manifest.get("row_count"), manifest.get("result_count"), manifest.get("result_coverage", 0.0),
        len(manifest.get("shards", [])))
