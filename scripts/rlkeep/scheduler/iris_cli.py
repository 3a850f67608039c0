"""Scheduler access: Iris or SLURM through their command lines, or `none` (logs come from the store).

The pipeline sees one interface, `scheduler_for(record)` -> Scheduler (IrisScheduler,
SlurmScheduler, NoScheduler): `capture` (chain.json's attempts), `stop_retries` (retries.json,
through the one exact-stop loop `stop_each`), and where an attempt's trainer log is read
(`log_cli`, `stdout_paths`; rlkeep.sync). A new scheduler is one more subclass in SCHEDULERS.

Iris (docs/reference.md, "iris CLI"): the `iris job …` command line changed several times, so
rlkeep reads what the installed CLI offers (`iris job --help`, `iris job <cmd> --help`, once
per process) and picks, never guesses:

- state: `summary JOB --json` > `summary JOB` (text) > `describe JOB` > the job's row in
  `job list --prefix JOB`;
- exact stop: `stop JOB --no-include-children` where the flag exists, else `stop JOB` where
  `stop` is exact by default (it offers `--prefix` instead of the children flag), else
  `cancel JOB --exact`, else a `cancel JOB` that takes no `--prefix`;
- logs: `--max-lines N` with N at most IRIS_LOG_MAX_LINES, head and tail fetches
  (`--no-tail`/`--tail`, or V-a's default head and bare `--tail`); a `--tail` whose help says
  it follows the log is never used;
- listing children and the owner's other jobs: `job list [--prefix P] [--limit N]`.

A job the controller no longer knows ("not found": finished jobs are deleted after a retention
period) is `gone`, not an error. The controller cancels the unfinished descendants of a job
that ends in any state but succeeded, so an exact stop of a pending attempt with children
is refused unless every unfinished child is itself a pending attempt of this run. Times the
CLI does not print are null with the reason; `exit_code` of an unfinished job is null
(the CLI prints 0 until a job ends). States are polled, never inferred from log strings.

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
import time
from abc import ABC, abstractmethod
from calendar import timegm
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlkeep.errors import BlockedError, RlkeepError, SchedulerError
from rlkeep.jsonio import read_json, write_json
from rlkeep.records import JobRecord, load_record
from rlkeep.steps import StepContext, not_applicable, sentinel
from rlkeep.storage import open_store

TERMINAL_STATES = {"succeeded", "failed", "killed", "worker_failed", "unschedulable"}
PENDING_STATES = {"pending", "building"}
UNFINISHED_STATES = PENDING_STATES | {"running", "assigned"}
GONE = "gone"
STATE_NAMES = {
    0: "unspecified", 1: "pending", 2: "building", 3: "running", 4: "succeeded",
    5: "failed", 6: "killed", 7: "worker_failed", 8: "unschedulable",
}
IRIS_LOG_MAX_LINES = 100_000  # V-f rejects more per call; older servers' limit is unknown, so the same is assumed
IRIS_LIST_LIMIT = 10_000  # V-f's `job list --limit` maximum
STOP_WAIT_S = 120.0  # after a stop/cancel that may return early: how long the state is polled
STOP_POLL_S = 2.0
COMMAND_TIMEOUT_S = 600
TIMES_REASON = "the iris CLI prints no submitted/started/finished times for a job"


class JobGoneError(SchedulerError):
    """The controller does not know the job (deleted after its retention period, or never existed)."""


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SchedulerError(f"environment {name}={raw!r}: expected a number") from None


def log_cap() -> int:
    """Lines asked per `iris job logs` call: the version's maximum, or less (RLKEEP_IRIS_LOG_MAX_LINES)."""
    return max(1, min(IRIS_LOG_MAX_LINES, int(_env_number("RLKEEP_IRIS_LOG_MAX_LINES", IRIS_LOG_MAX_LINES))))


@dataclass(frozen=True)
class JobSummary:
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
    if isinstance(value, int):
        return STATE_NAMES.get(value, f"unknown({value})")
    text = str(value).strip().lower()
    text = text.removeprefix("job_state_")
    return text


def _exit_if_terminal(state: str, exit_code: int | None) -> int | None:
    """The CLI prints exit 0 while a job is pending or running: that is not an exit."""
    return exit_code if state in TERMINAL_STATES else None


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
    return {"id": job_id, "state": GONE, "exit_code": None, "error": None, "failure_count": None,
            "preemption_count": None, "submitted_ms": None, "started_ms": None, "finished_ms": None,
            "times_reason": TIMES_REASON, "task_count": None, "completed_count": None, "summary_format": "none",
            "queued_retry": False, "reason": reason,
            "exit_code_reason": "the controller no longer knows the job (deleted after its retention period)"}


# --------------------------------------------------------------------------- capability detection

_SECTION = re.compile(r"^(?P<name>[A-Z][A-Za-z ]*):\s*$")
_OPTION_NAME = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def parse_help(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Click `--help` output as ({command: help}, {option name: help})."""
    commands: dict[str, str] = {}
    options: dict[str, str] = {}
    section = None
    last_names: list[str] = []
    for line in text.splitlines():
        heading = _SECTION.match(line)
        if heading:
            section, last_names = heading["name"], []
            continue
        if not line.strip():
            continue
        stripped = line.strip()
        if section == "Commands" and line.startswith("  "):
            name, _, help_text = stripped.partition(" ")
            commands[name] = help_text.strip()
        elif section == "Options":
            if stripped.startswith("-"):
                head, _, help_text = stripped.partition("  ")
                help_text = help_text.strip()
                last_names = _OPTION_NAME.findall(head)
                for name in last_names:
                    options[name] = help_text
            elif last_names:  # a help text wrapped onto the next line
                for name in last_names:
                    options[name] = (options[name] + " " + stripped).strip()
    return commands, options


@dataclass(frozen=True)
class IrisForms:
    """The calls this `iris` offers for what rlkeep needs; None where it offers none (with why)."""

    commands: tuple[str, ...]
    status: tuple[str, ...] | None
    status_source: str | None
    stop: tuple[str, ...] | None
    logs_head: tuple[str, ...] | None
    logs_tail: tuple[str, ...] | None
    logs_one_end: tuple[str, ...] | None
    listing: tuple[str, ...] | None
    missing: dict[str, str]

    def require(self, need: str) -> tuple[str, ...]:
        form = {"status": self.status, "stop": self.stop, "list": self.listing}[need]
        if form is None:
            raise SchedulerError(f"the installed iris CLI offers no {self.missing[need]} (it has `iris job "
                                 f"{' | '.join(self.commands)}`); nothing was guessed")
        return form

    def to_json(self) -> dict[str, Any]:
        def shown(form: tuple[str, ...] | None) -> str | None:
            return None if form is None else "iris job " + " ".join(form)

        logs = {"head": shown(self.logs_head), "tail": shown(self.logs_tail), "one_end": shown(self.logs_one_end),
                "max_lines_per_call": log_cap()}
        return {"commands": list(self.commands), "summary": shown(self.status), "stop": shown(self.stop),
                "logs": logs, "list": shown(self.listing), "missing": dict(self.missing)}


def choose_forms(commands: dict[str, str], options: dict[str, dict[str, str]]) -> IrisForms:
    """Pick each call from what `--help` listed (pure: the tests feed it every version's help)."""
    missing: dict[str, str] = {}

    def opts(command: str) -> dict[str, str]:
        return options.get(command, {}) if command in commands else {}

    listing: tuple[str, ...] | None = None
    if "list" in commands:
        listing = ("list",) + (("--prefix", "{prefix}") if "--prefix" in opts("list") else ()) + \
                  (("--limit", str(IRIS_LIST_LIMIT)) if "--limit" in opts("list") else ())
    else:
        missing["list"] = "`job list` (needed to list a job's children and the owner's unrecorded attempts)"

    status: tuple[str, ...] | None
    if "summary" in commands and "--json" in opts("summary"):
        status, source = ("summary", "{job}", "--json"), "summary --json"
    elif "summary" in commands:
        status, source = ("summary", "{job}"), "summary"
    elif "describe" in commands:
        status, source = ("describe", "{job}"), "describe"
    elif listing is not None:
        status, source = listing, "list"
    else:
        status, source = None, None
        missing["status"] = "way to read a job's state (`job summary`, `job describe` or `job list`)"

    stop: tuple[str, ...] | None = None
    for command in ("stop", "kill"):
        flags = opts(command)
        if "--no-include-children" in flags:
            stop = (command, "{job}", "--no-include-children")
        elif command in commands and "--prefix" in flags and "--include-children" not in flags:
            stop = (command, "{job}")  # exact by default; --prefix opts into prefix matching
        if stop:
            break
    if stop is None and "cancel" in commands:
        flags = opts("cancel")
        if "--exact" in flags:
            stop = ("cancel", "{job}", "--exact")
        elif "--prefix" not in flags:
            stop = ("cancel", "{job}")  # one job id, no prefix matching
    if stop is None:
        missing["stop"] = ("exact stop (`stop --no-include-children`, an exact-by-default `stop` with `--prefix`, "
                           "`cancel --exact` or a `cancel` without `--prefix`)")

    head = tail = one_end = None
    flags = opts("logs")
    if "--max-lines" in flags:
        cap = ("--max-lines", "{n}")
        follows = bool(re.search(r"follow|stream", flags.get("--tail", ""), re.I))
        if "--no-tail" in flags and "--tail" in flags:
            head, tail = ("logs", "{job}", "--no-tail") + cap, ("logs", "{job}", "--tail") + cap
        elif "--tail" in flags and not follows:
            head, tail = ("logs", "{job}") + cap, ("logs", "{job}", "--tail") + cap  # V-a: head unless --tail
        else:
            one_end = ("logs", "{job}") + cap
    else:
        missing["logs"] = "`job logs --max-lines` (a bounded log fetch)"
    return IrisForms(tuple(sorted(commands)), status, source, stop, head, tail, one_end, listing, missing)


@dataclass(frozen=True)
class LogFetch:
    """One attempt's log as the CLI gave it, and whether it is provably the whole log."""

    text: str | None
    complete: bool | None  # True proven; False known truncated or unavailable; None not provable
    detail: str
    form: str | None


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


class IrisCli:
    """The `iris` command on PATH, bound to one cluster. What it offers is read once per process."""

    _forms_cache: dict[tuple[str, str], IrisForms] = {}

    def __init__(self, cluster: str, executable: str = "iris") -> None:
        self.cluster = cluster
        self.executable = executable

    def _binary(self) -> str:
        binary = shutil.which(self.executable)
        if binary is None:
            raise SchedulerError(f"the `{self.executable}` command is not on PATH; install the Iris CLI or use scheduler: none")
        return binary

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [self._binary(), f"--cluster={self.cluster}", *args]
        try:
            result = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SchedulerError(f"`iris {' '.join(args)}` did not answer within {COMMAND_TIMEOUT_S}s") from None
        if check and result.returncode != 0:
            self._raise(args, result)
        return result

    def _raise(self, args: tuple[str, ...], result: subprocess.CompletedProcess[str]) -> None:
        message = (f"`iris --cluster={self.cluster} {' '.join(args)}` exited {result.returncode}: "
                   f"{result.stderr.strip()[-500:]}")
        if result.returncode != 2 and "not found" in result.stderr.lower():
            raise JobGoneError(message)
        raise SchedulerError(message)

    @property
    def forms(self) -> IrisForms:
        key = (self._binary(), self.cluster)
        if key not in self._forms_cache:
            commands, _ = parse_help(self._run("job", "--help").stdout)
            options = {name: parse_help(self._run("job", name, "--help").stdout)[1]
                       for name in commands if name in {"summary", "describe", "list", "stop", "kill", "cancel", "logs"}}
            self._forms_cache[key] = choose_forms(commands, options)
        return self._forms_cache[key]

    def _call(self, form: tuple[str, ...], **values: str) -> subprocess.CompletedProcess[str]:
        return self._run("job", *(part.format(**values) if "{" in part else part for part in form))

    def summary(self, job_id: str) -> JobSummary:
        """The job's state by the best form this CLI offers; JobGoneError when the controller forgot it."""
        forms = self.forms
        form = forms.require("status")
        if forms.status_source == "list":
            rows = dict(self.list_jobs(job_id))
            if job_id not in rows:
                raise JobGoneError(f"`iris job {' '.join(form).format(prefix=job_id)}` does not list {job_id}")
            state = rows[job_id]
            return JobSummary(job_id=job_id, state=state, exit_code=None, failure_count=None, preemption_count=None,
                              source="list")
        result = self._call(form, job=job_id)
        if forms.status_source == "summary --json":
            return parse_summary_json(job_id, result.stdout)
        return parse_summary_text(job_id, result.stdout, forms.status_source or "summary")

    def entry(self, job_id: str) -> dict[str, Any]:
        """A chain.json entry: the summary, or `gone` with the controller's answer."""
        try:
            return self.summary(job_id).to_json()
        except JobGoneError as error:
            return gone_entry(job_id, str(error))

    def list_jobs(self, prefix: str) -> list[tuple[str, str]]:
        """(id, state) of every job whose id starts with `prefix` (filtered here when the CLI cannot)."""
        form = self.forms.require("list")
        rows = [row for row in parse_job_list(self._call(form, prefix=prefix).stdout) if row[0].startswith(prefix)]
        if "--limit" in form and len(rows) >= IRIS_LIST_LIMIT:
            raise SchedulerError(f"`iris job list --prefix {prefix}` returned its limit of {IRIS_LIST_LIMIT} jobs; "
                                 "the listing may be incomplete")
        return rows

    def stop(self, job_id: str) -> str:
        return self._call(self.forms.require("stop"), job=job_id).stdout

    def logs(self, job_id: str) -> LogFetch:
        """The log with proof of completeness, or with the reason it cannot be proven.

        The head and the tail fetch with the same cap returning the same lines, fewer than the
        cap, prove the whole log (a server that clamps silently would return different ends).
        A log longer than one fetch cannot be paged (the printed lines carry only hh:mm:ss),
        and a CLI that fetches one end only proves nothing. JobGoneError when the job is gone.
        """
        forms = self.forms
        cap = log_cap()
        if forms.logs_head and forms.logs_tail:
            head = self._call(forms.logs_head, job=job_id, n=str(cap)).stdout
            tail = self._call(forms.logs_tail, job=job_id, n=str(cap)).stdout
            shown = ("iris job " + " ".join(forms.logs_head) + " | iris job " + " ".join(forms.logs_tail)).format(
                job=job_id, n=cap)
            lines = _line_count(head)
            if head == tail and lines < cap and lines > 0:
                return LogFetch(head, True, f"the head and the tail fetch of at most {cap:,} lines returned the same "
                                            f"{lines:,} lines", shown)
            if lines == 0 and not tail:
                return LogFetch(head, None, "the CLI returned an empty log (what it returns for a job that never "
                                            "started, or whose log it lost)", shown)
            return LogFetch(None, False, f"the log is longer than one fetch ({cap:,} lines per call): the head and "
                                         "the tail differ, and this CLI cannot page (its lines carry no date)", shown)
        if forms.logs_one_end:
            text = self._call(forms.logs_one_end, job=job_id, n=str(cap)).stdout
            shown = "iris job " + " ".join(forms.logs_one_end).format(job=job_id, n=cap)
            lines = _line_count(text)
            if lines >= cap:
                return LogFetch(None, False, f"one fetch returned the {cap:,}-line cap: the log is truncated", shown)
            return LogFetch(text, None, f"this CLI fetches one end of a log only (no head/tail pair, no paging): "
                                        f"{lines:,} lines returned, which does not prove the log is complete", shown)
        return LogFetch(None, False, f"the installed iris CLI offers no {forms.missing.get('logs', '`job logs`')}", None)

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
    _refuse_running([entry["id"] for entry in chain if entry["state"] in SLURM_RUNNING_STATES], "SLURM job")
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

    return stop_each(pending, slurm.cancel, ended)


def _refuse_running(running: list[str], what: str) -> None:
    if running:
        raise SchedulerError(
            f"{what} {running[0]} is still running; rlkeep preserves finished runs: wait for it to end or stop it yourself"
        )


def stop_each(pending: list[dict[str, Any]], stop: Callable[[str], str], ended: Callable[[str], dict[str, Any]],
              extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda entry: {}) -> list[dict[str, Any]]:
    """The one stop loop: stop each pending chain entry by its exact id, then confirm it ended
    (`ended` raises when it did not); the retries.json entry of each."""
    stopped = []
    for entry in pending:
        output = stop(entry["id"])
        after = ended(entry["id"])
        stopped.append({"id": entry["id"], "state_before": entry["state"], "state_after": after["state"],
                        "stop_output": output.strip(), **extra(entry)})
    return stopped


# --------------------------------------------------------------------------- Iris: stops and unrecorded attempts


def _wait_until_ended(iris: IrisCli, job_id: str, wait_s: float, poll_s: float) -> dict[str, Any]:
    """Poll the state after a stop/cancel that may return before the job ended (bounded)."""
    deadline = time.monotonic() + wait_s
    while True:
        after = iris.entry(job_id)
        if after["state"] in TERMINAL_STATES or after["state"] == GONE:
            return after
        if time.monotonic() >= deadline:
            raise SchedulerError(f"iris job {iris.forms.stop[0] if iris.forms.stop else 'stop'} {job_id}: the job is "
                                 f"still {after['state']} {wait_s:g}s afterwards (RLKEEP_IRIS_STOP_WAIT_S)")
        time.sleep(poll_s)


def children_in_the_way(iris: IrisCli, pending: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Per pending attempt, its unfinished descendants that are not themselves pending attempts of this run."""
    if iris.forms.listing is None:
        raise SchedulerError(
            f"cannot list the children of {', '.join(pending)}: the installed iris CLI has no `job list`, and "
            "stopping a job cancels its unfinished children whatever flag is passed; nothing was stopped. "
            "Check `iris job list` on a newer CLI, or stop them yourself")
    in_the_way = {}
    for job_id in pending:
        children = [(child, state) for child, state in iris.list_jobs(job_id + "/")
                    if state not in TERMINAL_STATES and child not in pending]
        if children:
            in_the_way[job_id] = children
    return in_the_way


def stop_pending_retries(iris: IrisCli, chain: list[dict[str, Any]], *, named: set[str] | None = None,
                         wait_s: float | None = None, poll_s: float | None = None) -> list[dict[str, Any]]:
    """Stop the chain's attempts that are queued again (a pending resubmission or a scheduler retry of
    the same task, back in pending with failures), by exact id only, and only ids the record names.

    A running attempt means the run has not ended: an error, nothing is stopped. So is a pending
    attempt with an unfinished child that is not itself a pending attempt of this run: the
    controller would cancel that child with its parent.
    """
    named = {entry["id"] for entry in chain} if named is None else named
    wait_s = _env_number("RLKEEP_IRIS_STOP_WAIT_S", STOP_WAIT_S) if wait_s is None else wait_s
    poll_s = _env_number("RLKEEP_IRIS_STOP_POLL_S", STOP_POLL_S) if poll_s is None else poll_s
    _refuse_running([entry["id"] for entry in chain if entry["state"] in UNFINISHED_STATES - PENDING_STATES], "attempt")
    pending = [entry for entry in chain if entry["state"] in PENDING_STATES and entry["id"] in named]
    if not pending:
        return []
    iris.forms.require("stop")
    in_the_way = children_in_the_way(iris, [entry["id"] for entry in pending])
    if in_the_way:
        named_children = "; ".join(f"{parent}: {', '.join(f'{c} ({s})' for c, s in kids)}"
                                   for parent, kids in in_the_way.items())
        raise SchedulerError(
            f"nothing was stopped: stopping a pending attempt would also cancel its unfinished children, which are "
            f"not attempts of this run ({named_children}); the controller cancels the unfinished descendants of a "
            "job that ends other than succeeded, whatever flag is passed. Let them finish or stop them yourself, then rerun")
    return stop_each(pending, iris.stop, lambda job_id: _wait_until_ended(iris, job_id, wait_s, poll_s),
                     lambda entry: {"queued_retry": entry.get("queued_retry"),
                                    "stop_form": "iris job " + " ".join(iris.forms.stop or ()).format(job=entry["id"])})


def extends_run(job_id: str, roots: set[str]) -> bool:
    """`/u/j-r2`, `/u/j_retry`, `/u/j.2` extend `/u/j`; children (`/u/j/eval`) and other users' jobs do not."""
    if job_id.count("/") != 2:
        return False
    return any(job_id.startswith(root) and len(job_id) > len(root) and job_id[len(root)] in "-_." for root in roots)


def unrecorded_attempts(iris: IrisCli, user: str, job: str, chain: list[str],
                        other_runs: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """The owner's jobs that extend the run's id and that the chain does not name, and how that was checked.

    other_runs: job ids that another record in the same records folder names ({id: that job}):
    they are that run's attempts (`rl-demo-b` beside `rl-demo`), not unrecorded ones of this run.
    """
    other_runs = other_runs or {}
    if iris.forms.listing is None:
        return [], "not checked: the installed iris CLI has no `job list`"
    roots = {f"/{user}/{job}", *(job_id for job_id in chain if job_id.count("/") == 2)}
    prefixes = sorted(root for root in roots if not any(root != other and root.startswith(other) for other in roots))
    found: dict[str, str] = {}
    for prefix in prefixes:
        for job_id, state in iris.list_jobs(prefix):
            if job_id not in chain and job_id not in other_runs and extends_run(job_id, roots) \
                    and job_id.startswith(f"/{user}/"):
                found[job_id] = state
    how = "listed with " + ", ".join("iris job " + " ".join(iris.forms.listing).format(prefix=p) for p in prefixes)
    return [{"id": job_id, "state": state, "blocks_checkpoint_reads": state in UNFINISHED_STATES}
            for job_id, state in sorted(found.items())], how


def active_unrecorded(chain: dict[str, Any]) -> list[dict[str, Any]]:
    """chain.json's unrecorded attempts that may still write checkpoints (pending or running)."""
    return [entry for entry in chain.get("unrecorded") or [] if entry.get("state") in UNFINISHED_STATES]


def refuse_while_unrecorded_attempts_run(chain: dict[str, Any], record_file: str) -> None:
    """Checkpoint folders are not read while an attempt the record does not name may write them."""
    active = active_unrecorded(chain)
    if active:
        named = ", ".join(f"{entry['id']} ({entry['state']})" for entry in active)
        lines = "\n".join(f"  - {entry['id']}" for entry in active)
        raise BlockedError(
            f"unrecorded attempt(s) of this run still pending or running: {named}; they may still write "
            "checkpoints, so none are read. rlkeep never stops an attempt the record does not name. If it belongs "
            f"to this run, add it to `chain:` in {record_file}:\n{lines}\nand rerun (rlkeep then stops it by exact "
            "id if it is still pending); otherwise let it end or stop it yourself, then rerun")


# --------------------------------------------------------------------------- one interface, three schedulers


class Scheduler(ABC):
    """What the pipeline asks of the scheduler that ran a record's chain (`scheduler:` in the
    record): the attempts' states for chain.json, the exact stop of pending retries for
    retries.json, and where an attempt's trainer log can be read (rlkeep.sync)."""

    name: ClassVar[str]
    terminal_states: ClassVar[frozenset[str] | None] = None  # None: this scheduler reports no states

    def __init__(self, record: JobRecord) -> None:
        self.record = record

    @abstractmethod
    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(every attempt's chain.json entry in record order, the scheduler's own chain.json fields)."""

    @abstractmethod
    def stop_retries(self, chain: dict[str, Any]) -> dict[str, Any]:
        """retries.json: the chain's pending retries stopped by exact id, nothing else."""

    def all_terminal(self, attempts: list[dict[str, Any]]) -> bool | None:
        if self.terminal_states is None:
            return None
        return all(attempt["state"] in self.terminal_states for attempt in attempts)

    def log_cli(self) -> IrisCli | None:
        """A command line that prints an attempt's log with proof of completeness, if there is one."""
        return None

    def stdout_paths(self, attempts: list[dict[str, Any]]) -> dict[str, str]:
        """{attempt slug: the path its scheduler wrote its stdout to}, where the scheduler says one."""
        return {}


def _checked(chain: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": attempt["id"], "state": attempt["state"]} for attempt in chain["attempts"]]


class IrisScheduler(Scheduler):
    name = "iris"
    terminal_states = frozenset(TERMINAL_STATES | {GONE})

    def __init__(self, record: JobRecord) -> None:
        super().__init__(record)
        self.iris = IrisCli(record.cluster or "")

    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        record = self.record
        self.iris.forms.require("status")
        attempts = []
        for job_id, slug in zip(record.chain, record.attempts):
            entry = {"slug": slug, **self.iris.entry(job_id)}
            if entry["state"] == GONE:
                entry.update(_store_log(record, slug))
            attempts.append(entry)
        unrecorded, how = unrecorded_attempts(self.iris, record.user, record.job, list(record.chain),
                                              chains_of_other_records(ctx))
        return attempts, {"iris_cli": self.iris.forms.to_json(), "unrecorded": unrecorded, "unrecorded_check": how}

    def stop_retries(self, chain: dict[str, Any]) -> dict[str, Any]:
        stopped = stop_pending_retries(self.iris, chain["attempts"], named=set(self.record.chain))
        return sentinel(
            "completed", stopped=stopped, checked=_checked(chain),
            not_stopped_unrecorded=[u["id"] for u in chain.get("unrecorded") or []],
            note=(f"stopped exact ids only ({stopped[0]['stop_form'].replace(stopped[0]['id'], 'JOB')})" if stopped
                  else "no pending retries"),
        )

    def log_cli(self) -> IrisCli | None:
        return self.iris


class SlurmScheduler(Scheduler):
    name = "slurm"
    terminal_states = frozenset(SLURM_TERMINAL_STATES)

    def __init__(self, record: JobRecord) -> None:
        super().__init__(record)
        self.slurm = SlurmCli()

    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"slug": job_id, **self.slurm.show(job_id)} for job_id in self.record.chain], {}

    def stop_retries(self, chain: dict[str, Any]) -> dict[str, Any]:
        stopped = stop_pending_slurm(self.slurm, chain["attempts"], self.record.user)
        return sentinel("completed", stopped=stopped, checked=_checked(chain),
                        note="cancelled exact ids only (scancel <id>)" if stopped else "no pending retries")

    def stdout_paths(self, attempts: list[dict[str, Any]]) -> dict[str, str]:
        return {a["slug"]: a["stdout"] for a in attempts if a.get("stdout")}


class NoScheduler(Scheduler):
    """`scheduler: none`: no scheduler to ask; the logs come from the store."""

    name = "none"

    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"slug": job_id.rsplit("/", 1)[-1], "id": job_id, "state": "unknown", "summary_format": "none"}
                for job_id in self.record.chain], {}

    def stop_retries(self, chain: dict[str, Any]) -> dict[str, Any]:
        return not_applicable("scheduler none: nothing to cancel", stopped=[])


SCHEDULERS: dict[str, type[Scheduler]] = {cls.name: cls for cls in (IrisScheduler, SlurmScheduler, NoScheduler)}


def scheduler_for(record: JobRecord) -> Scheduler:
    """The record's scheduler (records.py validated the name)."""
    return SCHEDULERS[record.scheduler](record)


# --------------------------------------------------------------------------- pipeline steps


def _store_log(record: JobRecord, slug: str) -> dict[str, Any]:
    """Where a gone attempt's log is still kept: the store's `<layout.logs>/<attempt>.out`, if there."""
    key = f"{record.layout['logs']}/{slug}.out"
    try:
        present = open_store(record.store).exists(key)
    except Exception as error:  # noqa: BLE001 - an unreachable store only leaves this unknown
        return {"store_log": None, "store_log_reason": f"could not check {record.store}/{key}: {error}"}
    return {"store_log": f"{record.store}/{key}" if present else None,
            **({} if present else {"store_log_reason": f"no {record.store}/{key}"})}


def chains_of_other_records(ctx: StepContext) -> dict[str, str]:
    """{job id: job} for every attempt another readable record of this data root names."""
    records_dir = ctx.data_root / str(ctx.config.get("records", "records"))
    claimed: dict[str, str] = {}
    for path in sorted(records_dir.glob("*.yaml")) if records_dir.is_dir() else []:
        if path.stem == ctx.job:
            continue
        try:
            other = load_record(path)
        except RlkeepError:
            continue  # an unreadable record names nothing; its own run reports it
        claimed.update({job_id: other.job for job_id in other.chain})
    return claimed


def capture_chain_step(ctx: StepContext) -> None:
    """`<job>/chain.json`: every attempt in record order with its scheduler state, plus (Iris)
    the CLI forms used and the owner's unrecorded attempts of this run."""
    record = ctx.record
    scheduler = scheduler_for(record)
    attempts, extra = scheduler.capture(ctx)
    evidence = {
        "job": record.job,
        "scheduler": record.scheduler,
        "cluster": record.cluster,
        "attempts": attempts,
        "tracker_url": record.tracker_url,
        "kind": record.kind,
        "terminal": scheduler.all_terminal(attempts),
        **extra,
    }
    write_json(ctx.outputs["chain"], sentinel("completed", **evidence))


def stop_retries_step(ctx: StepContext) -> None:
    """`<job>/retries.json`: stop the chain's pending retries by exact id, nothing else."""
    write_json(ctx.outputs["retries"], scheduler_for(ctx.record).stop_retries(read_json(ctx.inputs["chain"])))
