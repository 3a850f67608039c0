"""Scheduler access: Iris through its command line, or `none` (logs come from the store).

Iris facts (shared/reference/formats.md section 6): `job summary JOB --json` (absent on newer
marin main: then the text form is parsed), `job logs JOB --no-tail --max-lines N` (0 means the
server default of 1,000 lines, so rlkeep passes a cap and fails if the cap is reached), and
`job stop JOB --no-include-children` (with children, stop terminates a whole prefix subtree:
rlkeep only ever passes exact ids). States are polled, never inferred from log strings.

Commands are argument lists run without a shell: record values never meet a shell parser.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkeep.errors import SchedulerError

if TYPE_CHECKING:
    from rlkeep.steps import StepContext

TERMINAL_STATES = {"succeeded", "failed", "killed", "worker_failed", "unschedulable"}
PENDING_STATES = {"pending", "building"}
STATE_NAMES = {
    0: "unspecified", 1: "pending", 2: "building", 3: "running", 4: "succeeded",
    5: "failed", 6: "killed", 7: "worker_failed", 8: "unschedulable",
}
LOG_LINE_CAP = 2_000_000
LOG_LINE_CAP_MAX = 200_000_000
COMMAND_TIMEOUT_S = 600


@dataclass(frozen=True)
class JobSummary:
    job_id: str
    state: str
    exit_code: int | None = None
    error: str | None = None
    failure_count: int = 0
    preemption_count: int = 0
    submitted_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    task_count: int | None = None
    completed_count: int | None = None
    source: str = "json"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.job_id, "state": self.state, "exit_code": self.exit_code, "error": self.error,
            "failure_count": self.failure_count, "preemption_count": self.preemption_count,
            "submitted_ms": self.submitted_ms, "started_ms": self.started_ms, "finished_ms": self.finished_ms,
            "task_count": self.task_count, "completed_count": self.completed_count, "summary_format": self.source,
        }


def normalise_state(value: Any) -> str:
    if isinstance(value, int):
        return STATE_NAMES.get(value, f"unknown({value})")
    text = str(value).strip().lower()
    text = text.removeprefix("job_state_")
    return text


def parse_summary_json(job_id: str, text: str) -> JobSummary:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise SchedulerError(f"iris job summary {job_id} --json: output is not JSON ({error.msg} at {error.pos})") from None
    if not isinstance(data, dict) or "state" not in data:
        raise SchedulerError(f"iris job summary {job_id} --json: expected an object with 'state', got {text[:200]!r}")

    def number(key: str) -> int | None:
        value = data.get(key)
        return int(value) if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()) else None

    return JobSummary(
        job_id=data.get("job_id") or job_id,
        state=normalise_state(data["state"]),
        exit_code=number("exit_code"),
        error=data.get("error") or None,
        failure_count=number("failure_count") or 0,
        preemption_count=number("preemption_count") or 0,
        submitted_ms=number("submitted_ms"),
        started_ms=number("started_ms"),
        finished_ms=number("finished_ms"),
        task_count=number("task_count"),
        completed_count=number("completed_count"),
        source="json",
    )


_STATE_LINE = re.compile(
    r"State:\s*(?P<state>[A-Za-z_]+)\s+exit=(?P<exit>-?\d+|-)\s+failures=(?P<failures>\d+)\s+preemptions=(?P<preemptions>\d+)"
)
_TASKS_LINE = re.compile(r"Tasks:\s*(?P<done>\d+)/(?P<total>\d+)\s+completed")


def parse_summary_text(job_id: str, text: str) -> JobSummary:
    match = _STATE_LINE.search(text)
    if not match:
        raise SchedulerError(
            f"iris job summary {job_id}: no 'State: <state>  exit=<n>  failures=<n>  preemptions=<n>' line in output {text[:200]!r}"
        )
    tasks = _TASKS_LINE.search(text)
    exit_text = match["exit"]
    return JobSummary(
        job_id=job_id,
        state=normalise_state(match["state"]),
        exit_code=None if exit_text == "-" else int(exit_text),
        failure_count=int(match["failures"]),
        preemption_count=int(match["preemptions"]),
        task_count=int(tasks["total"]) if tasks else None,
        completed_count=int(tasks["done"]) if tasks else None,
        source="text",
    )


class IrisCli:
    """The `iris` command on PATH, bound to one cluster."""

    def __init__(self, cluster: str, executable: str = "iris") -> None:
        self.cluster = cluster
        self.executable = executable

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        binary = shutil.which(self.executable)
        if binary is None:
            raise SchedulerError(f"the `{self.executable}` command is not on PATH; install the Iris CLI or use scheduler: none")
        command = [binary, f"--cluster={self.cluster}", *args]
        try:
            result = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SchedulerError(f"`iris {' '.join(args)}` did not answer within {COMMAND_TIMEOUT_S}s") from None
        if check and result.returncode != 0:
            raise SchedulerError(
                f"`iris --cluster={self.cluster} {' '.join(args)}` exited {result.returncode}: {result.stderr.strip()[-500:]}"
            )
        return result

    def summary(self, job_id: str) -> JobSummary:
        result = self._run("job", "summary", job_id, "--json", check=False)
        if result.returncode == 0:
            return parse_summary_json(job_id, result.stdout)
        if "--json" in result.stderr or "no such option" in result.stderr.lower():
            text = self._run("job", "summary", job_id)
            return parse_summary_text(job_id, text.stdout)
        raise SchedulerError(
            f"`iris --cluster={self.cluster} job summary {job_id} --json` exited {result.returncode}: {result.stderr.strip()[-500:]}"
        )

    def logs(self, job_id: str) -> str:
        """The job's full log. A cap is always passed; reaching it means truncation, so grow it."""
        cap = LOG_LINE_CAP
        while True:
            result = self._run("job", "logs", job_id, "--no-tail", "--max-lines", str(cap))
            lines = result.stdout.count("\n") + (0 if result.stdout.endswith("\n") or not result.stdout else 1)
            if lines < cap:
                return result.stdout
            if cap >= LOG_LINE_CAP_MAX:
                raise SchedulerError(f"iris job logs {job_id}: the log reached the {cap:,}-line cap; refusing a truncated log")
            cap *= 10

    def stop(self, job_id: str) -> str:
        result = self._run("job", "stop", job_id, "--no-include-children")
        return result.stdout


def stop_pending_retries(iris: IrisCli, chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stop the chain's attempts that are queued again (pending/building), by exact id only.

    A running attempt means the run has not ended: that is an error, not something to stop.
    """
    running = [entry["id"] for entry in chain if entry["state"] == "running"]
    if running:
        raise SchedulerError(
            f"attempt {running[0]} is still running; rlkeep preserves finished runs: wait for it to end or stop it yourself"
        )
    stopped = []
    for entry in chain:
        if entry["state"] not in PENDING_STATES:
            continue
        output = iris.stop(entry["id"])
        after = iris.summary(entry["id"])
        if after.state not in TERMINAL_STATES:
            raise SchedulerError(f"iris job stop {entry['id']}: the job is still {after.state} afterwards")
        stopped.append({"id": entry["id"], "state_before": entry["state"], "state_after": after.state,
                        "stop_output": output.strip()})
    return stopped


# --------------------------------------------------------------------------- pipeline steps


def capture_chain(ctx: StepContext) -> None:
    """`<job>/chain.json`: every attempt in record order with its scheduler state."""
    from rlkeep.jsonio import write_json
    from rlkeep.steps import sentinel

    record = ctx.record
    attempts = []
    if record.scheduler == "iris":
        iris = IrisCli(record.cluster or "")
        for job_id in record.chain:
            summary = iris.summary(job_id)
            attempts.append({"slug": job_id.rsplit("/", 1)[-1], **summary.to_json()})
    else:
        for job_id in record.chain:
            attempts.append({"slug": job_id.rsplit("/", 1)[-1], "id": job_id, "state": "unknown",
                             "summary_format": "none"})
    evidence = {
        "job": record.job,
        "scheduler": record.scheduler,
        "cluster": record.cluster,
        "attempts": attempts,
        "tracker_url": record.tracker_url,
        "terminal": all(a["state"] in TERMINAL_STATES for a in attempts) if record.scheduler == "iris" else None,
    }
    write_json(ctx.outputs["chain"], sentinel("completed", **evidence))


def stop_retries(ctx: StepContext) -> None:
    """`<job>/retries.json`: stop the chain's pending retries by exact id, nothing else."""
    from rlkeep.jsonio import read_json, write_json
    from rlkeep.steps import not_applicable, sentinel

    chain = read_json(ctx.inputs["chain"])
    if ctx.record.scheduler != "iris":
        write_json(ctx.outputs["retries"], not_applicable("scheduler none: nothing to cancel", stopped=[]))
        return
    iris = IrisCli(ctx.record.cluster or "")
    stopped = stop_pending_retries(iris, chain["attempts"])
    write_json(ctx.outputs["retries"], sentinel(
        "completed", stopped=stopped,
        checked=[{"id": a["id"], "state": a["state"]} for a in chain["attempts"]],
        note="stopped exact ids only (--no-include-children)" if stopped else "no pending retries",
    ))

