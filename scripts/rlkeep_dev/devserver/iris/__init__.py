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

from .cli import install_executable, main
from .output import full_log
from .parsing import UsageError, command_help, group_help, parse_args
from .versions import (DEFAULT_MAX_LINES, DEFAULT_VERSION, TERMINAL, V_F_LIST_LIMIT, V_F_MAX_LINES, VERSIONS, Command,
                       Opt)

__all__ = ["DEFAULT_MAX_LINES", "DEFAULT_VERSION", "TERMINAL", "V_F_LIST_LIMIT", "V_F_MAX_LINES", "VERSIONS", "Command",
           "Opt", "UsageError", "command_help", "full_log", "group_help", "install_executable", "main", "parse_args"]
