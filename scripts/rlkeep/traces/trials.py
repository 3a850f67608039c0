"""Trial discovery: the trial directories of an extracted trace root, or of a sync tar read in one
streaming pass, each as the bytes of the files the export reads (`TrialContent`)."""
from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlkeep.errors import RlkeepError
from rlkeep.hashing import HashingReader
from rlkeep.traces.tarsafe import (
    HASH_CHUNK, iter_members, member_path, read_member, unsafe_member_reason,
)

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
            reader = HashingReader(raw)
            try:
                with tarfile.open(fileobj=reader, mode="r|*") as tar:
                    yield from self._trials(tar)
            except tarfile.TarError as error:
                raise RlkeepError(f"{self.tar_path}: not a readable tar: {error}") from error
            _, self.sha256 = reader.read_to_end(HASH_CHUNK)  # with the padding after the end-of-archive blocks

    def _trials(self, tar: tarfile.TarFile) -> Iterator[TrialContent]:
        current: str | None = None
        names: set[str] = set()
        files: dict[str, bytes] = {}
        is_trial = False
        for member in iter_members(tar):
            reason = unsafe_member_reason(member)
            if reason:
                raise RlkeepError(f"{self.tar_path}: refusing the whole tar: member {member.name!r}: {reason}")
            rel = member_path(member.name)
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
                files[inner] = read_member(tar, member)
        if current is not None and is_trial:
            yield TrialContent(current, files)
