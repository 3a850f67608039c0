"""The run's tracker URL: the record's when it names one, else one the trainer itself printed.

W&B prints where a run lives when it starts and when it finishes, e.g.
    wandb: 🚀 View run at https://wandb.ai/<entity>/<project>/runs/<id>
    wandb: 🚀 View run <name> at: https://wandb.ai/<entity>/<project>/runs/<id>
possibly coloured and behind Ray or Iris prefixes. Only such a line counts; a URL is never
built from an entity, project or run name, and the record's URL always wins.
"""
from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkeep.folderstate import remembered

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
_VIEW_RUN = re.compile(rb"wandb:\s+(?:\S+\s+)?View run(?:\s+.+?)?\s+at:?\s+(https?://[^\s'\"<>]+)")
_TRAILING = b".,;:)]}'\""


@dataclass(frozen=True)
class PrintedUrl:
    url: str
    line: int  # 1-based line number in the log


def tracker_urls_in_log(data: bytes | Iterable[bytes]) -> list[PrintedUrl]:
    """Every W&B "View run ... at" URL in one trainer log, in order (repeats included).

    data: the log's bytes, or its lines (e.g. a file object, so a large log is never held whole).
    """
    found: list[PrintedUrl] = []
    if isinstance(data, (bytes, bytearray)):
        if b"View run" not in data:
            return found
        data = bytes(data).split(b"\n")
    for number, line in enumerate(data, start=1):
        if b"View run" not in line:
            continue
        match = _VIEW_RUN.search(_ANSI.sub(b"", line) if b"\x1b" in line else line)
        if match:
            url = match.group(1).rstrip(_TRAILING).decode("utf-8", "replace")
            found.append(PrintedUrl(url, number))
    return found


def tracker_from_logs(logs: Iterable[tuple[str, str, bytes | Iterable[bytes]]]) -> tuple[str | None, dict[str, Any] | None]:
    """(first printed URL, its source) over (attempt, log name, bytes) in chain order; (None, None)
    when no log printed one. The source names the attempt, log and line, and any other URL
    printed (a fresh W&B run per attempt gives one URL each)."""
    first: tuple[str, dict[str, Any]] | None = None
    others: list[dict[str, Any]] = []
    for attempt, name, data in logs:
        for printed in tracker_urls_in_log(data):
            where = {"attempt": attempt, "log": name, "line": printed.line}
            if first is None:
                first = (printed.url, where)
            elif printed.url != first[0] and printed.url not in {o["url"] for o in others}:
                others.append({"url": printed.url, **where})
    if first is None:
        return None, None
    url, where = first
    return url, {"from": "trainer log", **where, **({"other_urls": others} if others else {})}


def _attempt_logs(logs_tar: Path, attempts: list[str]) -> Iterable[tuple[str, str, Iterable[bytes]]]:
    """The trainer log of each attempt in chain order from sync/logs.tar (attempts/<slug>/trainer.log)."""
    with tarfile.open(logs_tar) as tar:
        for attempt in attempts:
            name = f"attempts/{attempt}/trainer.log"
            try:
                handle = tar.extractfile(name)
            except KeyError:
                continue
            if handle is not None:
                yield attempt, name, handle  # read line by line


def tracker_of(record: Any, job_dir: Path) -> tuple[str | None, Any]:
    """(tracker URL, where it comes from) for DONE: the record's, else one the trainer printed."""
    if record.tracker_url:
        return record.tracker_url, "record"
    logs_tar = Path(job_dir) / "sync" / "logs.tar"
    if not logs_tar.is_file():
        return None, "not recorded; the trainer logs are not synced yet"
    # read once per version of logs.tar (rlkeep.folderstate.remembered): every invocation ends by writing STATUS.json
    # and the campaign pages, both of which ask this of every job, whose logs no longer change
    attempts = list(record.attempts)
    url, source = remembered(Path(job_dir), "tracker", logs_tar, attempts,
                             lambda: list(tracker_from_logs(_attempt_logs(logs_tar, attempts))))
    if url is None:
        return None, "not recorded, and no trainer log printed one"
    return url, {**source, "logs": "sync/logs.tar"}
