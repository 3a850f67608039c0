"""Trials: one row per Harbor trial from its result.json."""
from __future__ import annotations

import mmap
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

from rlkeep.jsonskim import SkimError, pick_members
from rlkeep.metrics.common import MetricsError
from rlkeep.metrics.lines import coerce_value


# --------------------------------------------------------------------------- trials (result.json)

TRIAL_COLUMNS: tuple[str, ...] = (
    "trial", "task", "reward", "exception_type", "n_input_tokens", "n_output_tokens", "n_episodes",
    "trial_duration", "environment_setup_duration", "agent_setup_duration",
    "agent_execution_duration", "verifier_duration", "error",
)
PHASES: tuple[str, ...] = ("environment_setup", "agent_setup", "agent_execution", "verifier")

_RESULT_FIELDS: dict[str, Any] = {
    "task_name": None, "trial_name": None, "verifier_result": None, "exception_info": None,
    "started_at": None, "finished_at": None,
    "agent_result": {"n_input_tokens": None, "n_output_tokens": None, "metadata": {"n_episodes": None}},
    **{phase: None for phase in PHASES},
}


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def span_seconds(started: Any, finished: Any) -> float | None:
    """Seconds between two ISO times; None when either is missing, unparseable, or one has a
    zone and the other not (subtracting those would be a guess)."""
    start, end = _parse_time(started), _parse_time(finished)
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return round((end - start).total_seconds(), 6)


def _phase_seconds(span: Any) -> float | None:
    if not isinstance(span, dict):
        return None
    return span_seconds(span.get("started_at"), span.get("finished_at"))


def _number_or_none(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def trial_from_result(trial: str, data: Any) -> dict[str, Any]:
    """One trials.csv row from a result.json's bytes (or mmap); malformed input gives a row
    whose `error` says why ("<reason>: <detail>") instead of raising."""
    row: dict[str, Any] = {column: None for column in TRIAL_COLUMNS}
    row["trial"] = trial
    try:
        picked = pick_members(data, _RESULT_FIELDS, "result.json")
        for name in ("verifier_result", "exception_info", "agent_result"):
            if picked.get(name) is not None and not isinstance(picked[name], dict):
                raise SkimError("unexpected-shape", f"{name} is {type(picked[name]).__name__}, expected an object or null")
    except SkimError as error:
        row["error"] = str(error)
        return row
    row["task"] = picked.get("task_name")
    verifier = picked.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    if isinstance(rewards, dict):
        row["reward"] = _number_or_none(coerce_value(rewards.get("reward")))
    exception = picked.get("exception_info")
    if isinstance(exception, dict):
        row["exception_type"] = exception.get("exception_type") or "unknown"
    agent = picked.get("agent_result") or {}
    row["n_input_tokens"] = _number_or_none(agent.get("n_input_tokens"))
    row["n_output_tokens"] = _number_or_none(agent.get("n_output_tokens"))
    metadata = agent.get("metadata")
    if isinstance(metadata, dict):
        row["n_episodes"] = _number_or_none(metadata.get("n_episodes"))
    row["trial_duration"] = span_seconds(picked.get("started_at"), picked.get("finished_at"))
    for phase in PHASES:
        row[f"{phase}_duration"] = _phase_seconds(picked.get(phase))
    return row


def trials_from_results(items: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Trial rows from (trial dir name, result.json bytes-like) pairs, sorted by trial.

    Pass a generator to hold one result.json at a time; an mmap avoids reading it at all.
    """
    return sorted((trial_from_result(trial, data) for trial, data in items), key=lambda row: row["trial"])


def iter_result_files(trace_dir: str | os.PathLike[str]) -> Iterator[tuple[str, Any]]:
    """(trial, mmap or b"") for every <trace_dir>/<trial>/result.json, one open at a time."""
    root = Path(trace_dir)
    if not root.is_dir():
        raise MetricsError(f"{root}: trace directory does not exist")
    for trial_dir in sorted(entry for entry in root.iterdir() if entry.is_dir()):
        path = trial_dir / "result.json"
        if not path.is_file():
            continue
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                yield trial_dir.name, b""
                continue
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield trial_dir.name, mapped
