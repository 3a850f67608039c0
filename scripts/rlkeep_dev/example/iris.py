"""State for the stand-in `iris` command: the run's chain plus jobs that must never be stopped.

The last attempt is, by default, a queued scheduler retry of the same task: back in pending
with one failure recorded and its task's attempts `/user/job/0:0` (failed) and `…:1` (pending).
Bystanders: an unrelated pending job and its pending child, another user's job of the same
name, and a finished `<job>-r10` the chain does not name (an unrecorded attempt that ended, so
it blocks nothing); a pending job whose id extends the run's would be an unrecorded attempt
that blocks checkpoint reads.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import ExampleRun


def _task(job_id: str, state: str, exit_code: int | None, duration_ms: int | None, memory_mb: int,
          memory_peak_mb: int) -> dict[str, Any]:
    return {"task_id": f"{job_id}/0", "index": 0, "state": state, "exit_code": exit_code,
            "duration_ms": duration_ms, "memory_mb": memory_mb, "memory_peak_mb": memory_peak_mb}


def _log_lines(job_id: str, timed_lines: list[tuple[str, str]]) -> list[str]:
    return [f"[{hhmmss}] task={job_id}/0 | {text}" for hhmmss, text in timed_lines]


def _chain_job(run: "ExampleRun", index: int, pending: bool) -> dict[str, Any]:
    times = run.attempt_times[index]
    job_id = run.chain[index]
    slug = job_id.rsplit("/", 1)[1]
    job: dict[str, Any] = {
        "state": "pending" if pending else "failed",
        "exit_code": None if pending else 1,
        "error": times["error"],
        "failure_count": 1,
        "preemption_count": times["preemption_count"],
        "submitted_ms": times["submitted_ms"],
        "started_ms": times["started_ms"],
        "finished_ms": None if pending else times["finished_ms"],
        "task_count": 1,
        "completed_count": 0,
        "log_lines": _log_lines(job_id, run.stdout_lines[slug]),
    }
    if pending:  # the failed try was requeued: nothing running, nothing finished
        job["tasks"] = [_task(job_id, "pending", None, None, 0, times["memory_peak_mb"])]
        job["tasks"][0]["attempts"] = [
            {"attempt_id": f"{job_id}/0:0", "state": "failed", "exit_code": 1, "error": times["error"]},
            {"attempt_id": f"{job_id}/0:1", "state": "pending", "exit_code": None, "error": ""},
        ]
    else:
        duration = times["finished_ms"] - times["started_ms"]
        job["tasks"] = [_task(job_id, "failed", 1, duration, times["memory_mb"], times["memory_peak_mb"])]
    return job


def _bystander(job_id: str, submitted_ms: int) -> dict[str, Any]:
    return {
        "state": "pending", "exit_code": None, "error": "", "failure_count": 0, "preemption_count": 0,
        "submitted_ms": submitted_ms, "started_ms": None, "finished_ms": None, "task_count": 1,
        "completed_count": 0, "tasks": [_task(job_id, "pending", None, None, 0, 0)], "log_lines": [],
    }


def iris_state(run: "ExampleRun", *, pending_retry: bool = True, extra_jobs: bool = True) -> dict:
    jobs: dict[str, Any] = {}
    last = len(run.chain) - 1
    for index in range(len(run.chain)):
        jobs[run.chain[index]] = _chain_job(run, index, pending=pending_retry and index == last)
    if extra_jobs:
        later = run.attempt_times[last]["submitted_ms"] + 600_000
        other = f"/{run.user}/other-{run.job}"
        for offset, job_id in enumerate([other, f"{other}/eval", f"/someoneelse/{run.job}",
                                         f"/{run.user}/{run.job}-r10"]):
            jobs[job_id] = _bystander(job_id, later + offset * 1000)
        jobs[f"/{run.user}/{run.job}-r10"].update(state="failed", exit_code=1, failure_count=1)
    return {"jobs": jobs}
