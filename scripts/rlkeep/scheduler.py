"""Scheduler access: Iris or SLURM through their command lines, or `none` (logs come from the store).

Iris facts (shared/reference/formats.md section 6): `job summary JOB --json` (absent on newer
marin main: then the text form is parsed), `job logs JOB --no-tail --max-lines N` (0 means the
server default of 1,000 lines, so rlkeep passes a cap and fails if the cap is reached), and
`job stop JOB --no-include-children` (with children, stop terminates a whole prefix subtree:
rlkeep only ever passes exact ids). States are polled, never inferred from log strings.

SLURM facts: `scontrol show job <id> -o` prints one line of Key=Value pairs (JobState,
ExitCode=<code>:<signal>, SubmitTime/StartTime/EndTime in the client's time zone, which rlkeep
sets to UTC, StdOut, Restarts, UserId=<name>(<uid>)); once the controller forgets a finished job
it exits 1 ("Invalid job id specified") and `sacct -j <id> -X -n -P -o JobID,State,ExitCode,
Submit,Start,End` answers from the accounting database. Pending retries are cancelled with
`scancel <exact id>` only.

Commands are argument lists run without a shell: record values never meet a shell parser.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from calendar import timegm
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


# --------------------------------------------------------------------------- SLURM

SLURM_PENDING_STATES = {"pending", "requeued", "requeue_hold", "requeue_fed", "resv_del_hold", "special_exit"}
SLURM_RUNNING_STATES = {"running", "configuring", "completing", "suspended", "stage_out", "signaling", "resizing",
                        "stopped"}
SLURM_TERMINAL_STATES = {"completed", "failed", "cancelled", "timeout", "node_fail", "preempted", "out_of_memory",
                         "boot_fail", "deadline", "revoked"}
SACCT_FIELDS = ("JobID", "State", "ExitCode", "Submit", "Start", "End")
_SCONTROL_KEY = re.compile(r"^[A-Z][A-Za-z0-9_:/]*=")
_SLURM_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


def parse_scontrol_line(text: str) -> dict[str, str]:
    """`scontrol show job -o` output as {Key: Value}. A value may contain spaces (Command=...
    args): a token starts a new pair only when it begins with a capitalised `Key=`."""
    fields: dict[str, str] = {}
    key: str | None = None
    for token in text.strip().split(" "):
        if _SCONTROL_KEY.match(token):
            key, _, value = token.partition("=")
            fields[key] = value
        elif key is not None:
            fields[key] += " " + token
    return fields


def slurm_time_ms(value: str | None) -> int | None:
    """`2026-03-28T09:14:02` (UTC: rlkeep runs the SLURM commands with TZ=UTC) as epoch ms;
    Unknown, None, N/A or empty give None."""
    if not value or not _SLURM_TIME.match(value):
        return None
    return timegm(datetime_tuple(value)) * 1000


def datetime_tuple(value: str) -> tuple[int, ...]:
    date, _, clock = value.partition("T")
    return tuple(int(part) for part in date.split("-") + clock.split(":"))


def normalise_slurm_state(value: str) -> str:
    """`CANCELLED by 1001` -> cancelled, `COMPLETED+` -> completed, `NODE_FAIL` -> node_fail."""
    return value.strip().split(" ", 1)[0].rstrip("+").lower() or "unknown"


def _exit_code(value: str | None) -> tuple[int | None, int | None]:
    code, _, signal = (value or "").partition(":")
    return (int(code) if code.isdigit() else None), (int(signal) if signal.isdigit() else None)


def expand_stdout_path(path: str, fields: dict[str, str]) -> str:
    """Expand the sbatch filename patterns scontrol may leave in StdOut (%j %A %a %x %u %%)."""
    if "%" not in path:
        return path
    user = fields.get("UserId", "").split("(", 1)[0]
    values = {"j": fields.get("JobId", ""), "A": fields.get("ArrayJobId", fields.get("JobId", "")),
              "a": fields.get("ArrayTaskId", ""), "x": fields.get("JobName", ""), "u": user, "%": "%"}
    return re.sub(r"%([jAaxu%])", lambda m: values[m.group(1)], path)


def slurm_entry(job_id: str, state: str, *, raw_state: str, exit_text: str | None, submitted: str | None,
                started: str | None, finished: str | None, source: str, **extra: Any) -> dict[str, Any]:
    """A chain entry in the same shape as Iris's (JobSummary.to_json) plus SLURM's own fields."""
    exit_code, signal = _exit_code(exit_text)
    return {
        "id": job_id, "state": state, "exit_code": exit_code, "error": extra.pop("error", None),
        "failure_count": 0, "preemption_count": 0,
        "submitted_ms": slurm_time_ms(submitted), "started_ms": slurm_time_ms(started),
        "finished_ms": slurm_time_ms(finished), "task_count": None, "completed_count": None,
        "summary_format": source, "scheduler_state": raw_state, "exit_signal": signal, **extra,
    }


def entry_from_scontrol(job_id: str, text: str) -> dict[str, Any]:
    fields = parse_scontrol_line(text)
    if "JobState" not in fields:
        raise SchedulerError(f"scontrol show job {job_id} -o: no JobState= in output {text[:200]!r}")
    state = normalise_slurm_state(fields["JobState"])
    reason = fields.get("Reason")
    stdout = fields.get("StdOut") or None
    return slurm_entry(
        job_id, state, raw_state=fields["JobState"], exit_text=fields.get("ExitCode"),
        submitted=fields.get("SubmitTime"), started=fields.get("StartTime"), finished=fields.get("EndTime"),
        source="scontrol",
        error=reason if reason and reason != "None" and state not in {"completed", "pending"} else None,
        reason=reason, restarts=int(fields["Restarts"]) if fields.get("Restarts", "").isdigit() else 0,
        user=fields.get("UserId", "").split("(", 1)[0] or None,
        stdout=expand_stdout_path(stdout, fields) if stdout else None,
        stderr=expand_stdout_path(fields["StdErr"], fields) if fields.get("StdErr") else None,
    )


def entry_from_sacct(job_id: str, text: str) -> dict[str, Any] | None:
    """The allocation line of `job_id` in `sacct -X -n -P` output, or None when it is not there."""
    for line in text.splitlines():
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS) or values[0] != job_id:
            continue
        row = dict(zip(SACCT_FIELDS, values))
        return slurm_entry(job_id, normalise_slurm_state(row["State"]), raw_state=row["State"],
                           exit_text=row["ExitCode"], submitted=row["Submit"], started=row["Start"],
                           finished=row["End"], source="sacct", restarts=None, user=None, stdout=None, stderr=None)
    return None


class SlurmCli:
    """`scontrol`, `sacct` and `scancel` on PATH (the login node of the run's cluster)."""

    def __init__(self, executables: dict[str, str] | None = None) -> None:
        self.executables = {"scontrol": "scontrol", "sacct": "sacct", "scancel": "scancel", **(executables or {})}

    def _run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        binary = shutil.which(self.executables[name])
        if binary is None:
            raise SchedulerError(f"the `{self.executables[name]}` command is not on PATH; run rlkeep on a login node "
                                 "of the run's SLURM cluster or use scheduler: none")
        env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}  # times parse as UTC ISO
        try:
            return subprocess.run([binary, *args], capture_output=True, text=True, errors="replace",
                                  timeout=COMMAND_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            raise SchedulerError(f"`{name} {' '.join(args)}` did not answer within {COMMAND_TIMEOUT_S}s") from None

    def show(self, job_id: str) -> dict[str, Any]:
        """The job's chain entry: scontrol, else sacct, else state unknown with the reason."""
        shown = self._run("scontrol", "show", "job", job_id, "-o")
        if shown.returncode == 0 and shown.stdout.strip():
            return entry_from_scontrol(job_id, shown.stdout.splitlines()[0])
        why = f"scontrol show job {job_id} -o exited {shown.returncode}: {shown.stderr.strip()[-300:]}"
        try:
            accounted = self._run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(SACCT_FIELDS))
        except SchedulerError as error:
            accounted, why = None, f"{why}; {error}"
        if accounted is not None:
            entry = entry_from_sacct(job_id, accounted.stdout) if accounted.returncode == 0 else None
            if entry is not None:
                return entry
            why += (f"; sacct -j {job_id} exited {accounted.returncode}: {accounted.stderr.strip()[-300:]}"
                    if accounted.returncode else f"; sacct has no record of {job_id}")
        return {"id": job_id, "state": "unknown", "reason": why, "summary_format": "none", "stdout": None}

    def cancel(self, job_id: str) -> str:
        result = self._run("scancel", job_id)
        if result.returncode != 0:
            raise SchedulerError(f"`scancel {job_id}` exited {result.returncode}: {result.stderr.strip()[-500:]}")
        return result.stdout


def stop_pending_slurm(slurm: SlurmCli, chain: list[dict[str, Any]], user: str) -> list[dict[str, Any]]:
    """`scancel` the chain's pending (requeued) attempts by exact id; they must be the record's user's."""
    running = [entry["id"] for entry in chain if entry["state"] in SLURM_RUNNING_STATES]
    if running:
        raise SchedulerError(
            f"SLURM job {running[0]} is still running; rlkeep preserves finished runs: wait for it to end or stop it yourself"
        )
    stopped = []
    for entry in chain:
        if entry["state"] not in SLURM_PENDING_STATES:
            continue
        owner = entry.get("user")
        if owner and owner != user:
            raise SchedulerError(f"SLURM job {entry['id']} is pending but belongs to {owner}, not the record's user "
                                 f"{user}; nothing was cancelled")
        output = slurm.cancel(entry["id"])
        after = slurm.show(entry["id"])
        if after["state"] not in SLURM_TERMINAL_STATES:
            raise SchedulerError(f"scancel {entry['id']}: the job is still {after['state']} afterwards")
        stopped.append({"id": entry["id"], "state_before": entry["state"], "state_after": after["state"],
                        "stop_output": output.strip()})
    return stopped


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
    elif record.scheduler == "slurm":
        slurm = SlurmCli()
        for job_id in record.chain:
            attempts.append({"slug": job_id, **slurm.show(job_id)})
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
        "kind": record.kind,
        "terminal": _all_terminal(record.scheduler, attempts),
    }
    write_json(ctx.outputs["chain"], sentinel("completed", **evidence))


def _all_terminal(scheduler: str, attempts: list[dict[str, Any]]) -> bool | None:
    terminal = {"iris": TERMINAL_STATES, "slurm": SLURM_TERMINAL_STATES}.get(scheduler)
    return None if terminal is None else all(a["state"] in terminal for a in attempts)


def stop_retries(ctx: StepContext) -> None:
    """`<job>/retries.json`: stop the chain's pending retries by exact id, nothing else."""
    from rlkeep.jsonio import read_json, write_json
    from rlkeep.steps import not_applicable, sentinel

    chain = read_json(ctx.inputs["chain"])
    if ctx.record.scheduler == "slurm":
        stopped = stop_pending_slurm(SlurmCli(), chain["attempts"], ctx.record.user)
        write_json(ctx.outputs["retries"], sentinel(
            "completed", stopped=stopped,
            checked=[{"id": a["id"], "state": a["state"]} for a in chain["attempts"]],
            note="cancelled exact ids only (scancel <id>)" if stopped else "no pending retries",
        ))
        return
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

