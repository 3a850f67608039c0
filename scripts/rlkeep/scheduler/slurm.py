"""The SLURM scheduler, through `scontrol`, `sacct` and `scancel` on PATH (a login node of the
run's cluster).

`scontrol show job <id> -o` prints one line of Key=Value pairs (JobState,
ExitCode=<code>:<signal>, SubmitTime/StartTime/EndTime in the client's time zone, which rlkeep
sets to UTC, StdOut, Restarts, UserId=<name>(<uid>)); once the controller forgets a finished job
it exits 1 ("Invalid job id specified") and `sacct -j <id> -X -n -P -o JobID,State,ExitCode,
Submit,Start,End` answers from the accounting database. Pending retries are cancelled with
`scancel <exact id>` only, and only the record user's. Commands are argument lists run without
a shell.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from calendar import timegm
from typing import Any

from rlkeep.errors import SchedulerError
from rlkeep.records import JobRecord
from rlkeep.scheduler.interface import (COMMAND_TIMEOUT_S, Scheduler, StopJournal, asked_again, checked_states,
                                        refuse_running, states_asked_again, stop_each, stopped_earlier)
from rlkeep.context import StepContext, sentinel

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
    """`2026-03-28T09:14:02` as (2026, 3, 28, 9, 14, 2)."""
    date, _, clock = value.partition("T")
    return tuple(int(part) for part in date.split("-") + clock.split(":"))


def normalise_slurm_state(value: str) -> str:
    """`CANCELLED by 1001` -> cancelled, `COMPLETED+` -> completed, `NODE_FAIL` -> node_fail."""
    return value.strip().split(" ", 1)[0].rstrip("+").lower() or "unknown"


def _exit_code(value: str | None) -> tuple[int | None, int | None]:
    """`ExitCode=<code>:<signal>` as (code, signal), None where absent."""
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
    """The chain entry of one `scontrol show job -o` line."""
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
        """`scancel <exact id>`; SchedulerError when it exits non-zero."""
        result = self._run("scancel", job_id)
        if result.returncode != 0:
            raise SchedulerError(f"`scancel {job_id}` exited {result.returncode}: {result.stderr.strip()[-500:]}")
        return result.stdout


def stop_pending_slurm(slurm: SlurmCli, chain: list[dict[str, Any]], user: str,
                       journal: StopJournal | None = None) -> list[dict[str, Any]]:
    """`scancel` the chain's pending (requeued) attempts by exact id; they must be the record's user's."""
    refuse_running([entry["id"] for entry in chain if entry["state"] in SLURM_RUNNING_STATES], "SLURM job")
    pending = [entry for entry in chain if entry["state"] in SLURM_PENDING_STATES]
    for entry in pending:
        owner = entry.get("user")
        if owner and owner != user:
            raise SchedulerError(f"SLURM job {entry['id']} is pending but belongs to {owner}, not the record's user "
                                 f"{user}; nothing was cancelled")

    def ended(job_id: str) -> dict[str, Any]:
        after = slurm.show(job_id)
        if after["state"] not in SLURM_TERMINAL_STATES:
            raise SchedulerError(f"scancel {job_id}: the job is still {after['state']} afterwards")
        return after

    return stop_each(pending, slurm.cancel, ended, journal=journal)


class SlurmScheduler(Scheduler):
    """`scheduler: slurm`: SLURM job ids, read and cancelled through SlurmCli."""

    name = "slurm"
    terminal_states = frozenset(SLURM_TERMINAL_STATES)
    running_states = frozenset(SLURM_RUNNING_STATES)
    unfinished_states = frozenset(SLURM_RUNNING_STATES | SLURM_PENDING_STATES)


    def __init__(self, record: JobRecord) -> None:
        super().__init__(record)
        self.slurm = SlurmCli()

    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"slug": job_id, **self.slurm.show(job_id)} for job_id in self.record.chain], {}

    def stop_retries(self, chain: dict[str, Any], journal: StopJournal) -> dict[str, Any]:
        attempts = asked_again(chain["attempts"], self.unfinished_states, self.slurm.show)
        stopped = stopped_earlier(chain["attempts"], attempts, journal, self.terminal_states) + \
            stop_pending_slurm(self.slurm, attempts, self.record.user, journal)
        return sentinel("completed", stopped=stopped, checked=checked_states(chain),
                        states_now=states_asked_again(chain["attempts"], attempts),
                        note="cancelled exact ids only (scancel <id>)" if stopped else "no pending retries")

    def stdout_paths(self, attempts: list[dict[str, Any]]) -> dict[str, str]:
        return {a["slug"]: a["stdout"] for a in attempts if a.get("stdout")}
