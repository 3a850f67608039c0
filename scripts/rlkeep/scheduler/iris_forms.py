"""Which `iris job …` calls the installed CLI offers, read from its `--help` (docs/reference.md,
"iris CLI"). The command line changed several times, so rlkeep reads what this CLI offers
(`iris job --help`, `iris job <cmd> --help`, once per process) and picks, never guesses:

- state: `summary JOB --json` > `summary JOB` (text) > `describe JOB` > the job's row in
  `job list --prefix JOB`;
- exact stop: `stop JOB --no-include-children` where the flag exists, else `stop JOB` where
  `stop` is exact by default (it offers `--prefix` instead of the children flag), else
  `cancel JOB --exact`, else a `cancel JOB` that takes no `--prefix`;
- logs: `--max-lines N` with N at most IRIS_LOG_MAX_LINES, head and tail fetches
  (`--no-tail`/`--tail`, or V-a's default head and bare `--tail`); a `--tail` whose help says
  it follows the log is never used;
- listing children and the owner's other jobs: `job list [--prefix P] [--limit N]`.

choose_forms is pure: the tests feed it every version's help.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlkeep.errors import SchedulerError
from rlkeep.scheduler.interface import env_number

IRIS_LOG_MAX_LINES = 100_000  # V-f rejects more per call; older servers' limit is unknown, so the same is assumed
IRIS_LIST_LIMIT = 10_000  # V-f's `job list --limit` maximum


def log_cap() -> int:
    """Lines asked per `iris job logs` call: the version's maximum, or less (RLKEEP_IRIS_LOG_MAX_LINES)."""
    return max(1, min(IRIS_LOG_MAX_LINES, int(env_number("RLKEEP_IRIS_LOG_MAX_LINES", IRIS_LOG_MAX_LINES))))


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
