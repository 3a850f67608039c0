"""What `iris job` prints: summaries, describe, list tables and log lines (full_log) per version."""
from __future__ import annotations

import re
import time
from typing import Any

from .versions import DEFAULT_VERSION, TERMINAL


def _counts(job: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in job.get("tasks", []):
        counts[task.get("state", "pending")] = counts.get(task.get("state", "pending"), 0) + 1
    return counts


def summary_json(job_id: str, job: dict[str, Any]) -> dict[str, Any]:
    """V-b's `summary --json`: no submitted/started/finished times; exit_code an int (0 while unfinished)."""
    tasks = []
    for task in job.get("tasks", []):
        tasks.append({"task_id": task.get("task_id"), "index": str(task.get("index", 0)), "state": task.get("state"),
                      "exit_code": task.get("exit_code") if task.get("state") in TERMINAL else None,
                      "duration_ms": task.get("duration_ms"), "memory_mb": task.get("memory_mb", 0),
                      "memory_peak_mb": task.get("memory_peak_mb", 0), "error": task.get("error", "")})
    return {"job_id": job_id, "name": job_id.rsplit("/", 1)[-1], "state": job["state"],
            "exit_code": int(job.get("exit_code") or 0), "error": job.get("error") or "",
            "failure_count": int(job.get("failure_count", 0)), "preemption_count": int(job.get("preemption_count", 0)),
            "task_count": int(job.get("task_count", len(tasks))), "completed_count": int(job.get("completed_count", 0)),
            "task_state_counts": _counts(job), "tasks": tasks}


def _state_line(job: dict[str, Any]) -> str:
    return (f"State: {job['state']}  exit={int(job.get('exit_code') or 0)}  "
            f"failures={job.get('failure_count', 0)}  preemptions={job.get('preemption_count', 0)}")


def summary_text(job_id: str, job: dict[str, Any]) -> str:
    tasks = job.get("tasks", [])
    counts = "  ".join(f"{k}={v}" for k, v in sorted(_counts(job).items()) if v)
    lines = [f"Job: {job_id} ({job_id.rsplit('/', 1)[-1]})", _state_line(job),
             f"Tasks: {job.get('completed_count', 0)}/{job.get('task_count', len(tasks))} completed  {counts}".rstrip()]
    if job.get("error"):
        lines.append(f"Error: {job['error']}")
    lines += ["", "TASK  STATE  EXIT  DURATION  PEAK MEM  CUR MEM  ERROR"]
    for task in tasks:
        exit_code = task.get("exit_code") if task.get("state") in TERMINAL else None
        lines.append(f"{task.get('index', 0)}  {task.get('state')}  {'-' if exit_code is None else exit_code}  "
                     f"{task.get('duration_ms') or '-'}  {task.get('memory_peak_mb') or '-'}  "
                     f"{task.get('memory_mb') or '-'}  {(task.get('error') or '')[:50]}".rstrip())
    return "\n".join(lines) + "\n"


def describe_text(version: str, job_id: str, job: dict[str, Any]) -> str:
    if version == "f":
        return f"Job: {job_id}\nState: {job['state']}\n"
    tasks = job.get("tasks", [])
    return (f"Job: {job_id}\n{_state_line(job)}\n"
            f"Tasks: {job.get('completed_count', 0)}/{job.get('task_count', len(tasks))} completed\n")


def list_text(jobs: dict[str, dict[str, Any]], state: str | None, prefix: str | None, limit: int | None) -> str:
    rows = [(job_id, job) for job_id, job in jobs.items() if not job.get("deleted")
            and (prefix is None or job_id.startswith(prefix)) and (state is None or job["state"] == state.lower())]
    rows.sort(key=lambda row: (row[1].get("submitted_ms") or 0, row[0]), reverse=True)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        return "No jobs found.\n"
    table = []
    for job_id, job in rows:
        submitted = job.get("submitted_ms")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(submitted / 1000)) if submitted else "-"
        table.append([job_id, job["state"], when, (job.get("error") or "")[:63]])
    headers = ["JOB ID", "STATE", "SUBMITTED", "REASON"]
    if not any(row[3] for row in table):
        headers, table = headers[:3], [row[:3] for row in table]
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *table)]
    out = ["  ".join(str(v).ljust(w) for v, w in zip(headers, widths)).rstrip()]
    out += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join(out) + "\n"


_LINE = re.compile(r"^\[(?P<t>\d\d:\d\d:\d\d)\] task=(?P<task>\S+) \| (?P<data>.*)$", re.S)


def _render_line(version: str, line: str, attempt: int) -> str:
    match = _LINE.match(line)
    if match is None or version not in ("e", "f"):
        return line
    if version == "e":
        return f"[{match['t']}] task={match['task']} attempt={attempt} | {match['data']}"
    return f"{match['t']} {match['task']}: {match['data']}"


def full_log(jobs: dict[str, dict[str, Any]], job_id: str, version: str = DEFAULT_VERSION) -> list[str]:
    """Every line `iris job logs` knows for a job and its descendants, as this version prints them."""
    lines: list[str] = []
    for other_id in sorted(jobs):
        if other_id == job_id or other_id.startswith(job_id + "/"):
            job = jobs[other_id]
            attempt = max(0, int(job.get("failure_count", 0)) - (1 if job["state"] == "pending" else 0))
            lines.extend(_render_line(version, line, attempt) for line in job.get("log_lines", []))
    return lines

