"""What the iris CLI prints about a job, parsed: the state vocabulary, JobSummary (a chain.json
entry) from `summary --json`, `summary` or `describe` text, `job list` rows, and the entry of a
job the controller no longer knows (`gone`, not an error). `exit_code` of an unfinished job is
null (the CLI prints 0 until a job ends); times the CLI does not print are null with the reason.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rlkeep.errors import SchedulerError

TERMINAL_STATES = {"succeeded", "failed", "killed", "worker_failed", "unschedulable"}
PENDING_STATES = {"pending", "building"}
UNFINISHED_STATES = PENDING_STATES | {"running", "assigned"}
GONE = "gone"
STATE_NAMES = {
    0: "unspecified", 1: "pending", 2: "building", 3: "running", 4: "succeeded",
    5: "failed", 6: "killed", 7: "worker_failed", 8: "unschedulable",
}
TIMES_REASON = "the iris CLI prints no submitted/started/finished times for a job"


@dataclass(frozen=True)
class JobSummary:
    """One job as the CLI describes it; to_json() is its chain.json entry."""

    job_id: str
    state: str
    exit_code: int | None = None
    error: str | None = None
    failure_count: int | None = 0
    preemption_count: int | None = 0
    task_count: int | None = None
    completed_count: int | None = None
    source: str = "json"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def queued_retry(self) -> bool | None:
        """Back in pending with failures recorded: the scheduler queued another attempt of the task."""
        if self.state not in PENDING_STATES:
            return False
        return None if self.failure_count is None else self.failure_count > 0

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": self.job_id, "state": self.state, "exit_code": self.exit_code, "error": self.error,
            "failure_count": self.failure_count, "preemption_count": self.preemption_count,
            "submitted_ms": None, "started_ms": None, "finished_ms": None, "times_reason": TIMES_REASON,
            "task_count": self.task_count, "completed_count": self.completed_count, "summary_format": self.source,
            "queued_retry": self.queued_retry,
        }
        if self.exit_code is None:
            entry["exit_code_reason"] = (f"the job is {self.state}: no exit yet" if self.state not in TERMINAL_STATES
                                         else f"`iris job {self.source}` prints no exit code")
        if self.failure_count is None:
            entry["failure_count_reason"] = f"`iris job {self.source}` prints no failure count"
        return {**entry, **self.extra}


def normalise_state(value: Any) -> str:
    """A state as the CLI prints it (`JOB_STATE_RUNNING`, `running`, or a number) in rlkeep's words."""
    if isinstance(value, int):
        return STATE_NAMES.get(value, f"unknown({value})")
    text = str(value).strip().lower()
    text = text.removeprefix("job_state_")
    return text


def _exit_if_terminal(state: str, exit_code: int | None) -> int | None:
    """The CLI prints exit 0 while a job is pending or running: that is not an exit."""
    return exit_code if state in TERMINAL_STATES else None


def parse_summary_json(job_id: str, text: str) -> JobSummary:
    """`iris job summary JOB --json` output as a JobSummary."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise SchedulerError(f"iris job summary {job_id} --json: output is not JSON ({error.msg} at {error.pos})") from None
    if not isinstance(data, dict) or "state" not in data:
        raise SchedulerError(f"iris job summary {job_id} --json: expected an object with 'state', got {text[:200]!r}")

    def number(key: str) -> int | None:
        value = data.get(key)
        return int(value) if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()) else None

    state = normalise_state(data["state"])
    return JobSummary(
        job_id=data.get("job_id") or job_id,
        state=state,
        exit_code=_exit_if_terminal(state, number("exit_code")),
        error=data.get("error") or None,
        failure_count=number("failure_count") or 0,
        preemption_count=number("preemption_count") or 0,
        task_count=number("task_count"),
        completed_count=number("completed_count"),
        source="summary --json",
    )


_STATE_LINE = re.compile(
    r"State:\s*(?P<state>[A-Za-z_]+)\s+exit=(?P<exit>-?\d+|-)\s+failures=(?P<failures>\d+)\s+preemptions=(?P<preemptions>\d+)"
)
_STATE_ONLY = re.compile(r"^State:\s*(?P<state>[A-Za-z_]+)\s*$", re.M)
_TASKS_LINE = re.compile(r"Tasks:\s*(?P<done>\d+)/(?P<total>\d+)\s+completed")


def parse_summary_text(job_id: str, text: str, source: str = "summary") -> JobSummary:
    """`summary` text, or `describe` (V-e prints the same State line; V-f only `State: <s>`)."""
    match = _STATE_LINE.search(text)
    if not match:
        only = _STATE_ONLY.search(text) if source == "describe" else None
        if only is None:
            raise SchedulerError(
                f"iris job {source} {job_id}: no 'State: <state>  exit=<n>  failures=<n>  preemptions=<n>' line "
                f"in output {text[:200]!r}"
            )
        return JobSummary(job_id=job_id, state=normalise_state(only["state"]), exit_code=None, failure_count=None,
                          preemption_count=None, source=source)
    tasks = _TASKS_LINE.search(text)
    state = normalise_state(match["state"])
    exit_text = match["exit"]
    return JobSummary(
        job_id=job_id,
        state=state,
        exit_code=_exit_if_terminal(state, None if exit_text == "-" else int(exit_text)),
        failure_count=int(match["failures"]),
        preemption_count=int(match["preemptions"]),
        task_count=int(tasks["total"]) if tasks else None,
        completed_count=int(tasks["done"]) if tasks else None,
        source=source,
    )


def parse_job_list(text: str) -> list[tuple[str, str]]:
    """(job id, state) rows of `iris job list` (a plain table under `JOB ID  STATE  SUBMITTED…`)."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("/"):
            rows.append((parts[0], normalise_state(parts[1])))
    return rows


def gone_entry(job_id: str, reason: str) -> dict[str, Any]:
    """The chain.json entry of a job the controller no longer knows, with its answer as the reason."""
    return {"id": job_id, "state": GONE, "exit_code": None, "error": None, "failure_count": None,
            "preemption_count": None, "submitted_ms": None, "started_ms": None, "finished_ms": None,
            "times_reason": TIMES_REASON, "task_count": None, "completed_count": None, "summary_format": "none",
            "queued_retry": False, "reason": reason,
            "exit_code_reason": "the controller no longer knows the job (deleted after its retention period)"}
