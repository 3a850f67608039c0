"""The completion record `<job>/DONE`, `<job>/REPORT.md` and `<job>/STATUS.json`.

STEPS is the one list of the pipeline's steps and the file that proves each one; the `done`
rule's inputs, DONE's `steps` and STATUS.json all come from it. A step's status is read from
its sentinel (`completed` or `not_applicable`); a step without its file is `blocked` when its
rule ran and failed (its log ends with `rlkeep: <reason>`), else `pending`.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.records import JobRecord

if TYPE_CHECKING:
    from rlkeep.steps import StepContext


@dataclass(frozen=True)
class Step:
    name: str  # the rule that makes it
    evidence: str  # the file (relative to <job>/) whose status counts
    remaining: str  # what an operator does when this step is blocked or pending


STEPS: tuple[Step, ...] = (
    Step("capture_chain", "chain.json", "make the Iris chain readable (iris on PATH, cluster reachable) and rerun"),
    Step("stop_retries", "retries.json", "stop the run's pending retries, then rerun"),
    Step("sync_logs", "sync/logs.manifest.json", "make every attempt's trainer log readable, then rerun"),
    Step("sync_traces", "sync/trace_jobs.manifest.json", "fix the trace prefix or the skip policy named in the log, then rerun"),
)


def step_status(job_dir: Path, step: Step) -> dict[str, Any]:
    path = job_dir / step.evidence
    if path.is_file():
        if path.suffix == ".json":
            try:
                status = read_json(path).get("status", "completed")
            except (ValueError, AttributeError):
                status = "completed"
        else:
            status = "completed"
        return {"status": status, "evidence": step.evidence}
    log_path = job_dir / "logs" / f"{step.name}.log"
    reason = last_error(log_path)
    if reason is not None:
        return {"status": "blocked", "reason": reason, "log": f"logs/{step.name}.log", "remaining": step.remaining}
    return {"status": "pending", "remaining": step.remaining}


def last_error(log_path: Path) -> str | None:
    """The reason of a step's latest failure, if its latest run (logs append) failed."""
    if not log_path.is_file():
        return None
    tail = log_path.read_bytes()[-16384:].decode("utf-8", "replace").splitlines()
    for line in reversed(tail):
        if line.startswith("rlkeep: "):
            return line.removeprefix("rlkeep: ")
        if line.startswith("Traceback (most recent call last)"):
            return f"unexpected error: see logs/{log_path.name}"
        if " done in " in line:
            return None
    return None


def collect_steps(job_dir: Path) -> dict[str, dict[str, Any]]:
    return {step.name: step_status(job_dir, step) for step in STEPS}


def rlkeep_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        result = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def terminal_state(chain: dict[str, Any], retries: dict[str, Any]) -> str:
    """The last attempt's state once this run's pending retries were stopped."""
    attempts = chain.get("attempts", [])
    if not attempts:
        return "unknown"
    last = attempts[-1]
    stopped = {entry["id"]: entry["state_after"] for entry in retries.get("stopped", [])}
    if last["id"] in stopped:
        return f"{stopped[last['id']]} (pending retry stopped by rlkeep)"
    return str(last.get("state", "unknown"))


def build_completion_record(job_dir: Path, record: JobRecord) -> dict[str, Any]:
    steps = collect_steps(job_dir)
    chain = read_json(job_dir / "chain.json")
    retries = read_json(job_dir / "retries.json")
    remaining = [
        {"step": name, "status": info["status"], "remaining": info.get("remaining", "")}
        for name, info in steps.items()
        if info["status"] not in {"completed", "not_applicable"}
    ]
    return {
        "job": record.job,
        "terminal_state": terminal_state(chain, retries),
        "source_revision": {"rlkeep": rlkeep_revision()},
        "chain": [a["id"] for a in chain.get("attempts", [])],
        "retries_stopped": [s["id"] for s in retries.get("stopped", [])],
        "tracker_url": record.tracker_url,
        "steps": {name: info["status"] for name, info in steps.items()},
        "remaining_work": remaining,
    }


def render_report(done: dict[str, Any]) -> str:
    lines = [f"# rlkeep completion record: {done['job']}", ""]
    lines.append(f"- Terminal state: **{done['terminal_state']}**")
    lines.append(f"- Attempts: {', '.join(done.get('chain', []))}")
    if done.get("retries_stopped"):
        lines.append(f"- Pending retries stopped: {', '.join(done['retries_stopped'])}")
    if done.get("tracker_url"):
        lines.append(f"- Tracker: {done['tracker_url']}")
    lines += ["", "## Steps", "", "| step | status |", "|---|---|"]
    lines += [f"| {name} | {status} |" for name, status in done["steps"].items()]
    lines += ["", "## Remaining work", ""]
    if done["remaining_work"]:
        lines += [f"- {item['step']} ({item['status']}): {item['remaining']}" for item in done["remaining_work"]]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def write_done(ctx: StepContext) -> None:
    done = build_completion_record(ctx.job_dir, ctx.record)
    done["completed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_bytes(ctx.outputs["report"], render_report(done).encode("utf-8"))
    write_json(ctx.outputs["done"], done)


def build_status(job_dir: Path) -> dict[str, Any]:
    steps = collect_steps(job_dir)
    by_status: dict[str, list[str]] = {"completed": [], "not_applicable": [], "blocked": [], "pending": []}
    for name, info in steps.items():
        by_status.setdefault(info["status"], []).append(name)
    return {
        "job": job_dir.name,
        "done": (job_dir / "DONE").is_file(),
        **by_status,
        "steps": steps,
        "remaining_work": [
            {"step": name, "status": info["status"], "reason": info.get("reason"), "remaining": info.get("remaining")}
            for name, info in steps.items()
            if info["status"] in {"blocked", "pending"}
        ],
    }


def write_status_for_jobs(data_root: Path, records_dir: Path) -> list[Path]:
    """STATUS.json for every job with a record and a job folder (called after every run)."""
    written = []
    records_dir = records_dir if records_dir.is_absolute() else data_root / records_dir
    if not records_dir.is_dir():
        return written
    for record_file in sorted(records_dir.glob("*.yaml")):
        job_dir = data_root / record_file.stem
        if not job_dir.is_dir():
            continue
        status = build_status(job_dir)
        previous = job_dir / "STATUS.json"
        if previous.is_file():
            try:
                if {k: v for k, v in read_json(previous).items() if k != "written_at"} == status:
                    continue
            except (ValueError, OSError):
                pass
        write_json(previous, {**status, "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        written.append(previous)
    return written
