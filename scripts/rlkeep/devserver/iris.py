"""A stand-in for the `iris` command (the one part of a run that cannot execute here).

It speaks the real CLI's interface and output formats (shared/reference/formats.md section 6)
from a JSON state file and appends every call to a JSONL log, so tests can check exactly
what was stopped. Environment: IRIS_STANDIN_STATE (state file, required), IRIS_STANDIN_CALLS
(call log), IRIS_STANDIN_NO_JSON=1 (behave like newer marin main, which lacks `--json`),
IRIS_STANDIN_FAIL=<subcommand> (that subcommand fails as if the controller were down).

State: {"jobs": {"/user/job": {"state", "exit_code", "error", "failure_count",
"preemption_count", "submitted_ms", "started_ms", "finished_ms", "task_count",
"completed_count", "tasks": [...], "log_lines": [...]}}}
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

TERMINAL = {"succeeded", "failed", "killed", "worker_failed", "unschedulable"}
DEFAULT_MAX_LINES = 1000


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


def _summary_text(job_id: str, job: dict[str, Any]) -> str:
    exit_code = job.get("exit_code")
    tasks = job.get("tasks", [])
    lines = [
        f"Job: {job_id}",
        f"State: {job['state']}  exit={'-' if exit_code is None else exit_code}  "
        f"failures={job.get('failure_count', 0)}  preemptions={job.get('preemption_count', 0)}",
        f"Tasks: {job.get('completed_count', 0)}/{job.get('task_count', len(tasks))} completed  "
        f"running={sum(1 for t in tasks if t.get('state') == 'running')}",
        "TASK STATE EXIT DURATION PEAK MEM CUR MEM ERROR",
    ]
    for task in tasks:
        lines.append(
            f"{task.get('task_id')} {task.get('state')} {task.get('exit_code', '-')} {task.get('duration_ms', 0)}ms "
            f"{task.get('memory_peak_mb', 0)}MB {task.get('memory_mb', 0)}MB {task.get('error', '')}".rstrip()
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _record_call(argv)
    state_path = os.environ.get("IRIS_STANDIN_STATE")
    if not state_path:
        return _fail("iris stand-in: IRIS_STANDIN_STATE is not set")
    args = [a for a in argv if not a.startswith("--cluster=")]
    if len(args) == len(argv):
        return _fail("Error: no cluster selected (--cluster=<name>)", 2)
    if len(args) < 3 or args[0] != "job":
        return _fail(f"Usage: iris job summary|logs|stop JOB ...; got {args}", 2)
    command, rest = args[1], args[2:]
    if os.environ.get("IRIS_STANDIN_FAIL") == command:
        return _fail("Error: failed to connect to controller: connection refused")

    handle = _state_lock(Path(state_path))
    try:
        state = json.loads(Path(state_path).read_text(encoding="utf-8"))
        jobs: dict[str, dict[str, Any]] = state["jobs"]
        if command == "summary":
            as_json = "--json" in rest
            if as_json and os.environ.get("IRIS_STANDIN_NO_JSON") == "1":
                return _fail("Error: No such option: --json", 2)
            job_id = next(a for a in rest if not a.startswith("--"))
            job = jobs.get(job_id)
            if job is None:
                return _fail(f"Error: job {job_id} not found")
            if as_json:
                payload = {"job_id": job_id, "name": job_id, **{k: v for k, v in job.items() if k != "log_lines"}}
                print(json.dumps(payload, indent=2))
            else:
                sys.stdout.write(_summary_text(job_id, job))
            return 0
        if command == "logs":
            job_id = rest[0]
            job = jobs.get(job_id)
            if job is None:
                return _fail(f"Error: job {job_id} not found")
            max_lines = DEFAULT_MAX_LINES
            if "--max-lines" in rest:
                max_lines = int(rest[rest.index("--max-lines") + 1]) or DEFAULT_MAX_LINES
            tail = "--no-tail" not in rest
            lines: list[str] = []
            for other_id in sorted(jobs):
                if other_id == job_id or other_id.startswith(job_id + "/"):
                    lines.extend(jobs[other_id].get("log_lines", []))
            lines = lines[-max_lines:] if tail else lines[:max_lines]
            sys.stdout.write("".join(line + "\n" for line in lines))
            return 0
        if command == "stop" or command == "kill":
            include_children = "--no-include-children" not in rest
            dry_run = "--dry-run" in rest
            targets = [a for a in rest if not a.startswith("--")]
            terminated = []
            for job_id in targets:
                for other_id in sorted(jobs):
                    hit = other_id == job_id or (include_children and other_id.startswith(job_id))
                    if hit and jobs[other_id]["state"] not in TERMINAL:
                        terminated.append(other_id)
                        if not dry_run:
                            jobs[other_id]["state"] = "killed"
            if terminated:
                print("Terminated jobs:")
                for job_id in terminated:
                    print(f"  {job_id}")
            else:
                print("No running jobs matched.")
            _save_state(Path(state_path), state)
            return 0
        return _fail(f"Error: No such command '{command}'.", 2)
    finally:
        handle.close()


def install_executable(bin_dir: Path) -> Path:
    """Write an `iris` executable into bin_dir that runs this stand-in with this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "iris"
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom rlkeep.devserver.iris import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
