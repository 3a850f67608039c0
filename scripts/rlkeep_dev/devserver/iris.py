"""A strict stand-in for the `iris` command (the one part of a run that cannot execute here).

It emulates the versions of `iris job …` listed in docs/reference.md, iris CLI, selected by
IRIS_STANDIN_VERSION (a..f, default f, the newest), from a JSON state file, and appends every
call to a JSONL log so tests can check exactly what was asked and stopped.

Per version (facts from the public marin `lib/iris/src/iris/cli/` source and the reference):

| v | state                 | stop                                             | logs                                        |
|---|-----------------------|--------------------------------------------------|---------------------------------------------|
| a | `list` only           | stop/kill `--include-children/--no-include-children` | `--max-lines`, bare `--tail` (head by default) |
| b | `summary [--json]`    | as a                                             | `--tail/--no-tail` (tail by default), `--since-ms` |
| c | `summary` (text)      | as a, plus `--stdin`, `--dry-run`                | as b                                        |
| d | `summary` (text)      | stop/kill exact by default, `--prefix` opts in   | as b                                        |
| e | `describe` (State line as summary's) | `cancel [--prefix/--exact]`, `wait` | as b; lines carry `attempt=<n>`             |
| f | `describe` (State only) | `cancel JOB`, returns before the job is cancelled | `--max-lines` 1..100000, `--tail` = follow |

Where the source is silent the stand-in follows the reference and says so: V-a's way to read a
job's state is `job list` (the reference names no summary/describe for it); every version has
`job list [--state] [--prefix]` as the V-c source shows (V-f adds `--limit`, default 100, max
10,000, after resource_commands.py's constants); V-e's `cancel` is exact by default; V-f's
`describe` prints `Job:` and `State:` only and its `logs` default returns the latest lines; a
deleted or unknown job answers `Error: Job <id> not found` (exit 1) on every command; the server
silently clamps `--max-lines` to IRIS_STANDIN_SERVER_MAX_LINES (default 100,000) and answers
1,000 lines when none are asked. `--follow` is not emulated.

Controller behaviour: a job that ends in any state but succeeded has its unfinished
descendants (`<id>/…`) cancelled; `stop` with children terminates every unfinished job whose id
starts with the given one (a prefix: `/u/j-r1` also hits `/u/j-r10`); a job marked
`"deleted": true` (retention) is not found; a scheduler retry is the same job back in `pending`
with `failure_count` > 0 and its task's `attempts` listed (`/user/job/0:N`).

Environment: IRIS_STANDIN_STATE (state file, required), IRIS_STANDIN_CALLS (call log),
IRIS_STANDIN_VERSION (a..f), IRIS_STANDIN_FAIL=<subcommand>|controller (that subcommand, or
every controller call, fails as if the controller were down; `--help` still answers),
IRIS_STANDIN_REMOVE=<cmd>[:<--option>],… (drop a command or an option from the emulated
version: proves a test fails when a flag disappears), IRIS_STANDIN_CANCEL_LAG (V-f: how many
later calls still see a cancelled job in its old state, default 2),
IRIS_STANDIN_SERVER_MAX_LINES.

State: {"jobs": {"/user/job": {"state", "exit_code", "error", "failure_count",
"preemption_count", "submitted_ms", "task_count", "completed_count", "tasks": [...],
"log_lines": [...], "deleted": bool}}}. Only the fields the real CLI prints are printed
(the JSON summary has no times).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = {"succeeded", "failed", "killed", "worker_failed", "unschedulable"}
DEFAULT_MAX_LINES = 1000
V_F_MAX_LINES = 100_000
V_F_LIST_LIMIT = (100, 10_000)
VERSIONS = ("a", "b", "c", "d", "e", "f")
DEFAULT_VERSION = "f"


@dataclass(frozen=True)
class Opt:
    names: tuple[str, ...]  # ("--max-lines",) or ("--tail", "--no-tail") for a boolean pair
    kind: str  # flag | int | str | pair
    help: str
    low: int | None = None
    high: int | None = None
    default: Any = None


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: str  # "JOB_ID" (one, required), "[JOB_ID]..." (any number) or "" (none)
    options: tuple[Opt, ...] = field(default_factory=tuple)


_CHILDREN = Opt(("--include-children", "--no-include-children"), "pair",
                "Terminate child jobs under the given job ID prefix (default: include).", default=True)
_STDIN = Opt(("--stdin",), "flag", "Also read job ids from stdin (one per line; CSV-tolerant).")
_DRY = Opt(("--dry-run",), "flag", "Print the jobs that would be terminated without sending.")
_MAX_LINES = Opt(("--max-lines",), "int", "Maximum number of log lines to return (0 = server default, currently 1000).",
                 default=0)
_SINCE = Opt(("--since-ms",), "int", "Only show logs after this epoch millisecond timestamp.")
_SINCE_S = Opt(("--since-seconds",), "int", "Only show logs from the last N seconds.")
_FOLLOW = Opt(("--follow", "-f"), "flag", "Stream logs continuously.")
_TAIL_PAIR = Opt(("--tail", "--no-tail"), "pair", "Return the most recent lines instead of the earliest.", default=True)
_LEVEL = Opt(("--level",), "str", "Minimum log level to display (e.g., --level warning).")
_LIST = (Opt(("--state",), "str", "Filter by state (e.g., running, pending, failed)"),
         Opt(("--prefix",), "str", "Anchored prefix match against the wire-form job_id (e.g. '/alice/exp-')."))


def _commands(version: str) -> dict[str, Command]:
    stop_help = "Terminate one or more jobs."
    kill_help = "Terminate one or more jobs (alias for stop)."
    logs_help = "Stream task logs for a job and its descendants using batch log fetching."
    commands: list[Command] = [Command("list", "List jobs with optional filtering.", "", _LIST)]
    if version == "f":
        commands[0] = Command("list", "List jobs with optional filtering.", "", _LIST + (
            Opt(("--limit",), "int", "Maximum number of jobs to list.", 1, V_F_LIST_LIMIT[1], V_F_LIST_LIMIT[0]),))
    if version == "b":
        commands.append(Command("summary", "Print a per-task summary (peak memory, state, exit, duration) for a job.",
                                "JOB_ID", (Opt(("--json",), "flag", "Print the summary as JSON."),)))
    if version in ("c", "d"):
        commands.append(Command("summary", "Print a per-task summary (peak memory, state, exit, duration) for a job.",
                                "JOB_ID"))
    if version in ("e", "f"):
        commands.append(Command("describe", "Describe one job.", "JOB_ID"))
    if version in ("a", "b"):
        stop_options: tuple[Opt, ...] = (_CHILDREN,)
    elif version == "c":
        stop_options = (_CHILDREN, _STDIN, _DRY)
    elif version == "d":
        stop_options = (Opt(("--prefix",), "flag", "Also terminate every job whose id starts with JOB_ID."), _STDIN, _DRY)
    else:
        stop_options = ()
    if version in ("a", "b", "c", "d"):
        commands += [Command("stop", stop_help, "[JOB_ID]...", stop_options),
                     Command("kill", kill_help, "[JOB_ID]...", stop_options)]
    if version == "e":
        commands += [Command("cancel", "Cancel jobs and their descendants.", "[JOB_ID]...",
                             (Opt(("--prefix", "--exact"), "pair", "Match JOB_ID as a prefix or exactly (default: exact).",
                                  default=False),)),
                     Command("wait", "Wait for a job to finish.", "JOB_ID")]
    if version == "f":
        commands.append(Command("cancel", "Cancel a job.", "JOB_ID"))
    if version == "a":
        logs_options: tuple[Opt, ...] = (_FOLLOW, _MAX_LINES, Opt(("--tail",), "flag",
                                                                  "Return the most recent lines instead of the earliest."))
    elif version == "f":
        logs_options = (Opt(("--max-lines",), "int", "Maximum number of log lines to return.", 1, V_F_MAX_LINES,
                            DEFAULT_MAX_LINES),
                        Opt(("--tail",), "flag", "Follow the log: stream new lines until the job ends."), _LEVEL)
    else:
        logs_options = (_SINCE, _SINCE_S, _FOLLOW, _MAX_LINES, _TAIL_PAIR, _LEVEL)
    commands.append(Command("logs", logs_help, "JOB_ID", logs_options))
    removed = [item.strip() for item in os.environ.get("IRIS_STANDIN_REMOVE", "").split(",") if item.strip()]
    by_name = {command.name: command for command in commands}
    for item in removed:
        name, _, option = item.partition(":")
        if name not in by_name:
            continue
        if not option:
            del by_name[name]
            continue
        kept = []
        for opt in by_name[name].options:
            if option not in opt.names:
                kept.append(opt)
            elif opt.kind == "pair":  # dropping one half of a pair leaves the other as a bare flag
                rest = tuple(n for n in opt.names if n != option)
                kept.append(Opt(rest, "flag", opt.help))
        by_name[name] = Command(name, by_name[name].help, by_name[name].args, tuple(kept))
    return dict(sorted(by_name.items()))


# --------------------------------------------------------------------------- click-like parsing


class UsageError(Exception):
    def __init__(self, message: str, usage: str, help_hint: str) -> None:
        super().__init__(message)
        self.message, self.usage, self.help_hint = message, usage, help_hint


def _usage(command: Command | None) -> tuple[str, str]:
    if command is None:
        return "Usage: iris job [OPTIONS] COMMAND [ARGS]...", "Try 'iris job --help' for help."
    args = f" {command.args}" if command.args else ""
    return f"Usage: iris job {command.name} [OPTIONS]{args}", f"Try 'iris job {command.name} --help' for help."


def _option_index(command: Command) -> dict[str, Opt]:
    return {name: opt for opt in command.options for name in opt.names}


def parse_args(command: Command, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Options (by first name) and positionals, as click would parse them, or UsageError."""
    usage, hint = _usage(command)
    index = _option_index(command)
    values: dict[str, Any] = {opt.names[0]: opt.default for opt in command.options}
    positionals: list[str] = []
    items = list(argv)
    while items:
        token = items.pop(0)
        if token == "--":
            positionals.extend(items)
            break
        if token.startswith("-") and token != "-":
            name, eq, inline = token.partition("=")
            opt = index.get(name)
            if opt is None:
                raise UsageError(f"No such option: {name}", usage, hint)
            key = opt.names[0]
            if opt.kind == "flag":
                values[key] = True
            elif opt.kind == "pair":
                values[key] = name == opt.names[0]
            else:
                if eq:
                    raw = inline
                elif items:
                    raw = items.pop(0)
                else:
                    raise UsageError(f"Option '{name}' requires an argument.", usage, hint)
                if opt.kind == "int":
                    try:
                        number = int(raw)
                    except ValueError:
                        raise UsageError(f"Invalid value for '{name}': '{raw}' is not a valid integer.", usage, hint) from None
                    if (opt.low is not None and number < opt.low) or (opt.high is not None and number > opt.high):
                        raise UsageError(f"Invalid value for '{name}': {number} is not in the range "
                                         f"{opt.low}<=x<={opt.high}.", usage, hint)
                    values[key] = number
                else:
                    values[key] = raw
            continue
        positionals.append(token)
    if command.args == "JOB_ID":
        if not positionals:
            raise UsageError("Missing argument 'JOB_ID'.", usage, hint)
        if len(positionals) > 1:
            raise UsageError(f"Got unexpected extra argument ({positionals[1]})", usage, hint)
    elif not command.args and positionals:
        raise UsageError(f"Got unexpected extra argument ({positionals[0]})", usage, hint)
    return values, positionals


def _option_help_lines(opt: Opt) -> str:
    names = " / ".join(opt.names) if opt.kind == "pair" else ", ".join(sorted(opt.names, key=len))
    if opt.kind in ("int", "str"):
        names += " INTEGER" if opt.kind == "int" else " TEXT"
        if opt.low is not None:
            names += f" RANGE"
    if len(names) > 30:
        return f"  {names}\n{' ' * 34}{opt.help}"
    return f"  {names:<32}{opt.help}"


def command_help(command: Command) -> str:
    usage, _ = _usage(command)
    lines = [usage, "", f"  {command.help}", "", "Options:"]
    lines += [_option_help_lines(opt) for opt in command.options]
    lines.append(f"  {'--help':<32}Show this message and exit.")
    return "\n".join(lines) + "\n"


def group_help(commands: dict[str, Command]) -> str:
    usage, _ = _usage(None)
    width = max(len("--help"), *(len(name) for name in commands)) + 2
    lines = [usage, "", "  Job management commands.", "", "Options:", f"  {'--help':<{width}}Show this message and exit.",
             "", "Commands:"]
    lines += [f"  {name:<{width}}{command.help}" for name, command in commands.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- state


def _state_lock(path: Path):  # type: ignore[no-untyped-def]
    """A lock beside the state file (the state itself is replaced by rename, so it cannot hold one)."""
    handle = open(path.with_name(path.name + ".lock"), "a", encoding="utf-8")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _save_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state whole: a stand-in killed mid-write leaves the old state, never half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _record_call(argv: list[str]) -> None:
    calls = os.environ.get("IRIS_STANDIN_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(json.dumps({"argv": argv}) + "\n")


def _fail(message: str, code: int = 1) -> int:
    print(message, file=sys.stderr)
    return code


def _end(jobs: dict[str, dict[str, Any]], job_id: str, state: str) -> list[str]:
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


def _advance_cancels(jobs: dict[str, dict[str, Any]]) -> bool:
    """V-f's cancel returns before the job is cancelled: each later call brings it closer."""
    changed = False
    for job_id in sorted(jobs):
        countdown = jobs[job_id].get("cancel_after_calls")
        if countdown is None:
            continue
        changed = True
        if countdown <= 1:
            _end(jobs, job_id, "killed")
        else:
            jobs[job_id]["cancel_after_calls"] = countdown - 1
    return changed


def _visible(jobs: dict[str, dict[str, Any]], job_id: str) -> dict[str, Any] | None:
    job = jobs.get(job_id)
    return None if job is None or job.get("deleted") else job


def _not_found(job_id: str) -> int:
    return _fail(f"Error: Job {job_id} not found")


# --------------------------------------------------------------------------- output


def _counts(job: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in job.get("tasks", []):
        counts[task.get("state", "pending")] = counts.get(task.get("state", "pending"), 0) + 1
    return counts


def _summary_json(job_id: str, job: dict[str, Any]) -> dict[str, Any]:
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


def _summary_text(job_id: str, job: dict[str, Any]) -> str:
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


def _describe(version: str, job_id: str, job: dict[str, Any]) -> str:
    if version == "f":
        return f"Job: {job_id}\nState: {job['state']}\n"
    tasks = job.get("tasks", [])
    return (f"Job: {job_id}\n{_state_line(job)}\n"
            f"Tasks: {job.get('completed_count', 0)}/{job.get('task_count', len(tasks))} completed\n")


def _list(jobs: dict[str, dict[str, Any]], state: str | None, prefix: str | None, limit: int | None) -> str:
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


# --------------------------------------------------------------------------- commands


def _run(version: str, command: Command, values: dict[str, Any], targets: list[str], state: dict[str, Any]) -> int:
    jobs: dict[str, dict[str, Any]] = state["jobs"]
    name = command.name
    if name == "list":
        sys.stdout.write(_list(jobs, values.get("--state"), values.get("--prefix"), values.get("--limit")))
        return 0
    if name in ("summary", "describe", "logs", "wait"):
        job = _visible(jobs, targets[0])
        if job is None:
            return _not_found(targets[0])
        if name == "summary":
            if values.get("--json"):
                print(json.dumps(_summary_json(targets[0], job), indent=2))
            else:
                sys.stdout.write(_summary_text(targets[0], job))
        elif name == "describe":
            sys.stdout.write(_describe(version, targets[0], job))
        elif name == "wait":
            return _fail("iris stand-in: `job wait` is not emulated")
        else:
            if values.get("--follow") or (version == "f" and values.get("--tail")):
                return _fail("iris stand-in: following a log is not emulated")
            server_max = int(os.environ.get("IRIS_STANDIN_SERVER_MAX_LINES", "100000"))
            asked = int(values.get("--max-lines") or 0) or DEFAULT_MAX_LINES
            count = min(asked, server_max)  # silently clamped, as the server may
            lines = full_log(jobs, targets[0], version)
            latest = values.get("--tail") if version == "a" else (True if version == "f" else values.get("--tail", True))
            lines = lines[-count:] if latest else lines[:count]
            sys.stdout.write("".join(line + "\n" for line in lines))
        return 0
    # stop / kill / cancel
    if not targets:
        usage, hint = _usage(command)
        raise UsageError("No jobs given. Pass job ids, or --stdin (or '-') to read them from stdin.", usage, hint)
    for job_id in targets:
        if _visible(jobs, job_id) is None:
            return _not_found(job_id)
    if name == "cancel" and version == "f":
        lag = int(os.environ.get("IRIS_STANDIN_CANCEL_LAG", "2"))
        job = jobs[targets[0]]
        if job["state"] not in TERMINAL:
            if lag <= 0:
                _end(jobs, targets[0], "killed")
            else:
                job["cancel_after_calls"] = lag
        print(f"Action: {uuid.uuid4().hex}\nState: accepted\nResult: ok")
        return 0
    if name == "cancel":
        prefix = bool(values.get("--prefix"))
    elif version == "d":
        prefix = bool(values.get("--prefix"))
    else:
        prefix = bool(values.get("--include-children", True))
    hit = [other for job_id in targets for other in sorted(jobs)
           if not jobs[other].get("deleted") and jobs[other]["state"] not in TERMINAL
           and (other == job_id or (prefix and other.startswith(job_id)))]
    if values.get("--dry-run"):
        print(f"[dry-run] would terminate {len(targets)} job(s):")
        for job_id in targets:
            print(f"  {job_id}")
        return 0
    terminated: list[str] = []
    for job_id in dict.fromkeys(hit):
        terminated += _end(jobs, job_id, "killed")
    if terminated:
        print("Terminated jobs:" if name != "cancel" else "Cancelled jobs:")
        for job_id in dict.fromkeys(terminated):
            print(f"  {job_id}")
    else:
        print("No running jobs matched.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _record_call(argv)
    version = os.environ.get("IRIS_STANDIN_VERSION", DEFAULT_VERSION).strip().lower().removeprefix("v-")
    if version not in VERSIONS:
        return _fail(f"iris stand-in: IRIS_STANDIN_VERSION={version!r}; expected one of {', '.join(VERSIONS)}")
    state_path = os.environ.get("IRIS_STANDIN_STATE")
    if not state_path:
        return _fail("iris stand-in: IRIS_STANDIN_STATE is not set")
    args = [a for a in argv if not a.startswith("--cluster=")]
    if len(args) == len(argv):
        return _fail("Error: no cluster selected (--cluster=<name>)", 2)
    if not args or args[0] != "job":
        return _fail(f"iris stand-in: only `iris job …` is emulated; got {args}", 2)
    commands = _commands(version)
    rest = args[1:]
    if not rest or rest[0] == "--help":
        sys.stdout.write(group_help(commands))
        return 0
    command = commands.get(rest[0])
    if command is None:
        usage, hint = _usage(None)
        if rest[0].startswith("-"):
            return _fail(f"{usage}\n{hint}\n\nError: No such option: {rest[0]}", 2)
        return _fail(f"{usage}\n{hint}\n\nError: No such command '{rest[0]}'.", 2)
    if "--help" in rest[1:rest.index("--") if "--" in rest else len(rest)]:
        sys.stdout.write(command_help(command))
        return 0
    try:
        values, targets = parse_args(command, rest[1:])
    except UsageError as error:
        return _fail(f"{error.usage}\n{error.help_hint}\n\nError: {error.message}", 2)
    failing = os.environ.get("IRIS_STANDIN_FAIL")
    if failing in (command.name, "controller"):
        return _fail("Error: failed to connect to controller: connection refused")

    handle = _state_lock(Path(state_path))
    try:
        state = json.loads(Path(state_path).read_text(encoding="utf-8"))
        before = json.dumps(state, sort_keys=True)
        _advance_cancels(state["jobs"])
        try:
            code = _run(version, command, values, targets, state)
        except UsageError as error:
            return _fail(f"{error.usage}\n{error.help_hint}\n\nError: {error.message}", 2)
        if json.dumps(state, sort_keys=True) != before:
            _save_state(Path(state_path), state)
        return code
    finally:
        handle.close()


def install_executable(bin_dir: Path) -> Path:
    """Write an `iris` executable into bin_dir that runs this stand-in with this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "iris"
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom rlkeep_dev.devserver.iris import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
