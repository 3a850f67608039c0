"""The `iris job` entry point: dispatch a parsed command against the state (_run), main, install_executable."""
from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from .output import describe_text, full_log, list_text, summary_json, summary_text
from .parsing import UsageError, command_help, group_help, parse_args, usage_lines
from .state import advance_cancels, end_job, fail, not_found, record_call, save_state, state_lock, visible_job
from .versions import DEFAULT_MAX_LINES, DEFAULT_VERSION, TERMINAL, VERSIONS, Command, commands_for


def _run(version: str, command: Command, values: dict[str, Any], targets: list[str], state: dict[str, Any]) -> int:
    jobs: dict[str, dict[str, Any]] = state["jobs"]
    name = command.name
    if name == "list":
        sys.stdout.write(list_text(jobs, values.get("--state"), values.get("--prefix"), values.get("--limit")))
        return 0
    if name in ("summary", "describe", "logs", "wait"):
        job = visible_job(jobs, targets[0])
        if job is None:
            return not_found(targets[0])
        if name == "summary":
            if values.get("--json"):
                print(json.dumps(summary_json(targets[0], job), indent=2))
            else:
                sys.stdout.write(summary_text(targets[0], job))
        elif name == "describe":
            sys.stdout.write(describe_text(version, targets[0], job))
        elif name == "wait":
            return fail("iris stand-in: `job wait` is not emulated")
        else:
            if values.get("--follow") or (version == "f" and values.get("--tail")):
                return fail("iris stand-in: following a log is not emulated")
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
        usage, hint = usage_lines(command)
        raise UsageError("No jobs given. Pass job ids, or --stdin (or '-') to read them from stdin.", usage, hint)
    for job_id in targets:
        if visible_job(jobs, job_id) is None:
            return not_found(job_id)
    if name == "cancel" and version == "f":
        lag = int(os.environ.get("IRIS_STANDIN_CANCEL_LAG", "2"))
        job = jobs[targets[0]]
        if job["state"] not in TERMINAL:
            if lag <= 0:
                end_job(jobs, targets[0], "killed")
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
        terminated += end_job(jobs, job_id, "killed")
    if terminated:
        print("Terminated jobs:" if name != "cancel" else "Cancelled jobs:")
        for job_id in dict.fromkeys(terminated):
            print(f"  {job_id}")
    else:
        print("No running jobs matched.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    record_call(argv)
    version = os.environ.get("IRIS_STANDIN_VERSION", DEFAULT_VERSION).strip().lower().removeprefix("v-")
    if version not in VERSIONS:
        return fail(f"iris stand-in: IRIS_STANDIN_VERSION={version!r}; expected one of {', '.join(VERSIONS)}")
    state_path = os.environ.get("IRIS_STANDIN_STATE")
    if not state_path:
        return fail("iris stand-in: IRIS_STANDIN_STATE is not set")
    args = [a for a in argv if not a.startswith("--cluster=")]
    if len(args) == len(argv):
        return fail("Error: no cluster selected (--cluster=<name>)", 2)
    if not args or args[0] != "job":
        return fail(f"iris stand-in: only `iris job …` is emulated; got {args}", 2)
    commands = commands_for(version)
    rest = args[1:]
    if not rest or rest[0] == "--help":
        sys.stdout.write(group_help(commands))
        return 0
    command = commands.get(rest[0])
    if command is None:
        usage, hint = usage_lines(None)
        if rest[0].startswith("-"):
            return fail(f"{usage}\n{hint}\n\nError: No such option: {rest[0]}", 2)
        return fail(f"{usage}\n{hint}\n\nError: No such command '{rest[0]}'.", 2)
    if "--help" in rest[1:rest.index("--") if "--" in rest else len(rest)]:
        sys.stdout.write(command_help(command))
        return 0
    try:
        values, targets = parse_args(command, rest[1:])
    except UsageError as error:
        return fail(f"{error.usage}\n{error.help_hint}\n\nError: {error.message}", 2)
    failing = os.environ.get("IRIS_STANDIN_FAIL")
    if failing in (command.name, "controller"):
        return fail("Error: failed to connect to controller: connection refused")

    handle = state_lock(Path(state_path))
    try:
        state = json.loads(Path(state_path).read_text(encoding="utf-8"))
        before = json.dumps(state, sort_keys=True)
        advance_cancels(state["jobs"])
        try:
            code = _run(version, command, values, targets, state)
        except UsageError as error:
            return fail(f"{error.usage}\n{error.help_hint}\n\nError: {error.message}", 2)
        if json.dumps(state, sort_keys=True) != before:
            save_state(Path(state_path), state)
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
