"""The stand-in's state file, its lock and call log, and the controller's job transitions."""
from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from .versions import TERMINAL


def state_lock(path: Path):  # type: ignore[no-untyped-def]
    """A lock beside the state file (the state itself is replaced by rename, so it cannot hold one)."""
    handle = open(path.with_name(path.name + ".lock"), "a", encoding="utf-8")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state whole: a stand-in killed mid-write leaves the old state, never half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def record_call(argv: list[str]) -> None:
    calls = os.environ.get("IRIS_STANDIN_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(json.dumps({"argv": argv}) + "\n")


def fail(message: str, code: int = 1) -> int:
    print(message, file=sys.stderr)
    return code


def end_job(jobs: dict[str, dict[str, Any]], job_id: str, state: str) -> list[str]:
    """Move an unfinished job to `state`; a non-succeeded end cancels its unfinished descendants."""
    ended = []
    job = jobs[job_id]
    if job["state"] in TERMINAL:
        return ended
    job["state"] = state
    job.pop("cancel_after_calls", None)
    ended.append(job_id)
    if state != "succeeded":
        for other_id in sorted(jobs):
            if other_id.startswith(job_id + "/") and jobs[other_id]["state"] not in TERMINAL:
                jobs[other_id]["state"] = "killed"
                jobs[other_id].pop("cancel_after_calls", None)
                ended.append(other_id)
    return ended


def advance_cancels(jobs: dict[str, dict[str, Any]]) -> bool:
    """V-f's cancel returns before the job is cancelled: each later call brings it closer."""
    changed = False
    for job_id in sorted(jobs):
        countdown = jobs[job_id].get("cancel_after_calls")
        if countdown is None:
            continue
        changed = True
        if countdown <= 1:
            end_job(jobs, job_id, "killed")
        else:
            jobs[job_id]["cancel_after_calls"] = countdown - 1
    return changed


def visible_job(jobs: dict[str, dict[str, Any]], job_id: str) -> dict[str, Any] | None:
    job = jobs.get(job_id)
    return None if job is None or job.get("deleted") else job


def not_found(job_id: str) -> int:
    return fail(f"Error: Job {job_id} not found")

