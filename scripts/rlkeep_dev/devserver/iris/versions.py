"""The emulated `iris job` surface per version: option and command shapes, and each version's command table."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
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


def commands_for(version: str) -> dict[str, Command]:
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

