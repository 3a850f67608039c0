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
    upstream: tuple[str, ...] = ()  # rules of this step only (e.g. staging) whose failure blocks it
    needs: tuple[str, ...] = ()  # other steps whose evidence it takes: it is blocked while one of them is


STEPS: tuple[Step, ...] = (
    Step("capture_chain", "chain.json", "make the Iris chain readable (iris on PATH, cluster reachable) and rerun"),
    Step("stop_retries", "retries.json", "stop the run's pending retries, then rerun"),
    Step("sync_logs", "sync/logs.manifest.json", "make every attempt's trainer log readable, then rerun"),
    Step("sync_traces", "sync/trace_jobs.manifest.json",
         "fix the trace prefix or the skip policy named in the log, then rerun"),
    Step("list_checkpoints", "checkpoint/candidates.json", "make the store's ckpts/ and exports/ listable, then rerun"),
    Step("metric_surface", "metrics/metrics.csv", "fix the trainer log named in the log, then rerun"),
    Step("select_checkpoint", "checkpoint/selected.json",
         "declare checkpoint.rule in the record (ema_max, latest or step) from the listed candidates, then rerun"),
    Step("export_model", "export.json",
         "consolidate the selected checkpoint as the log says (an export job for Megatron), then rerun"),
    Step("publish_model", "verify/model_upload.json",
         "fix the publication problem named in the log (staging is kept), then rerun: the upload resumes",
         upstream=("stage_model",)),
    Step("publish_traces", "verify/traces.json", "fix the trace dataset problem named in the log (coverage, Hub), then rerun",
         upstream=("stage_traces",), needs=("sync_traces",)),
    Step("link_model_card", "verify/model.json",
         "the model card links the trace dataset only once verify/traces.json exists: fix what holds the traces "
         "back (named in the reason), then rerun; the link is one commit that changes README.md only",
         needs=("publish_model", "publish_traces")),
    Step("register", "register.json", "resolve the registry problem named in the log, then rerun"),
    Step("archive", "archive/MANIFEST", "fix the archive problem named in the log, then rerun"),
    Step("verify_archive", "verify/archive.json",
         "make archive.dest reachable or fix the mismatch named in the log, then rerun"),
    Step("reclaim", "reclaim.json", "rerun with --config reclaim_authorized=<job> once every verification passed"),
)


STEP_BY_NAME = {step.name: step for step in STEPS}


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
    for name in step.needs:
        held = _blocked_need(job_dir, name)
        if held is not None:
            root, info = held
            return {"status": "blocked", "blocked_by": root, "log": info["log"], "remaining": step.remaining,
                    "reason": f"waits for {STEP_BY_NAME[name].evidence} ({name}); {root} is blocked: {info['reason']}"}
    for rule in (*step.upstream, step.name):
        reason = last_error(job_dir / "logs" / f"{rule}.log")
        if reason is not None:
            return {"status": "blocked", "reason": reason, "log": f"logs/{rule}.log", "remaining": step.remaining}
    return {"status": "pending", "remaining": step.remaining}


def _blocked_need(job_dir: Path, name: str) -> tuple[str, dict[str, Any]] | None:
    """(the step at the root of the blockage, its status) when step `name` is blocked."""
    info = step_status(job_dir, STEP_BY_NAME[name])
    if info["status"] != "blocked":
        return None
    root = info.get("blocked_by", name)
    return root, step_status(job_dir, STEP_BY_NAME[root]) if root != name else info


def last_error(log_path: Path) -> str | None:
    """The reason of a step's latest failure, if its latest run (logs append) failed."""
    if not log_path.is_file():
        return None
    tail = log_path.read_bytes()[-16384:].decode("utf-8", "replace").splitlines()
    for index in range(len(tail) - 1, -1, -1):
        line = tail[index]
        if line.startswith("rlkeep: "):  # a message may span lines: keep all of it
            return "\n".join([line.removeprefix("rlkeep: "), *tail[index + 1:]]).strip()
        if line.startswith("Traceback (most recent call last)"):
            return f"unexpected error: see logs/{log_path.name}"
        if " done in " in line:
            return None
    return None


def collect_steps(job_dir: Path, kind: str | None = None) -> dict[str, dict[str, Any]]:
    """Every step's status; a step the run's kind does not have is not_applicable (rlkeep.kinds)."""
    from rlkeep.kinds import spec_for

    spec = spec_for(kind)
    return {step.name: step_status(job_dir, step) if spec.applies(step.name) else
            {"status": "not_applicable", "reason": f"does not apply to a {spec.name} run"} for step in STEPS}


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


def _optional_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = read_json(path)
    return data if isinstance(data, dict) else None


REVISION_KEYS = ("source_revision", "git_sha", "git_commit", "git_revision", "commit_sha")


def run_source_revision(logs_tar: Path) -> str:
    """The training code's revision when the run recorded one in its resolved config; never guessed."""
    import re
    import tarfile

    if not logs_tar.is_file():
        return "not recorded"
    pattern = re.compile(rb"^\s*(?:" + b"|".join(k.encode() for k in REVISION_KEYS) + rb")\s*:\s*['\"]?([0-9a-f]{7,40})\b", re.M)
    with tarfile.open(logs_tar) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(("resolved_config.yaml", "config.yaml")) and member.size < 4 << 20:
                handle = tar.extractfile(member)
                match = pattern.search(handle.read()) if handle else None
                if match:
                    return f"{match.group(1).decode()} ({member.name})"
    return "not recorded"


def model_artifacts(job_dir: Path, record: JobRecord) -> dict[str, str]:
    """present | absent | not_applicable for each required model artifact (runbook completion record)."""
    if not record.spec.applies("export_model"):  # sft, datagen, eval: rlkeep makes no model
        return {key: "not_applicable" for key in ("weights", "tokenizer_configuration", "training_logs",
                                                   "training_traces_link")}
    if record.publish is None:
        stage = job_dir / "model"
        weights = "present" if any(stage.glob("*.safetensors")) else "absent"
        tokenizer = "present" if (stage / "config.json").is_file() and any(
            (stage / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")) else "absent"
        return {"weights": weights, "tokenizer_configuration": tokenizer,
                "training_logs": "not_applicable", "training_traces_link": "not_applicable"}
    # verify/model_upload.json: a fresh download passed every check but the trace link;
    # verify/model.json: the card links the verified trace dataset and every check passed again
    uploaded = any((_optional_json(job_dir / "verify" / name) or {}).get("status") == "completed"
                   for name in ("model_upload.json", "model.json"))
    linked = (_optional_json(job_dir / "verify" / "model.json") or {}).get("status") == "completed"
    state = "present" if uploaded else "absent"
    return {"weights": state, "tokenizer_configuration": state, "training_logs": state,
            "training_traces_link": "present" if linked else "absent"}


def build_completion_record(job_dir: Path, record: JobRecord) -> dict[str, Any]:
    steps = collect_steps(job_dir, record.kind)
    chain = read_json(job_dir / "chain.json")
    retries = read_json(job_dir / "retries.json")
    selected = _optional_json(job_dir / "checkpoint" / "selected.json") or {}
    export = _optional_json(job_dir / "export.json") or {}
    verify_model = _optional_json(job_dir / "verify" / "model.json") or {}
    verify_traces = _optional_json(job_dir / "verify" / "traces.json") or {}
    verify_archive = _optional_json(job_dir / "verify" / "archive.json") or {}
    register = _optional_json(job_dir / "register.json")
    reclaim = _optional_json(job_dir / "reclaim.json") or {}
    remaining = [
        {"step": name, "status": info["status"], "remaining": info.get("remaining", "")}
        for name, info in steps.items()
        if info["status"] not in {"completed", "not_applicable"}
    ]
    publish = record.publish or {}
    return {
        "job": record.job,
        "kind": record.kind,
        "terminal_state": terminal_state(chain, retries),
        "source_revision": {"run": run_source_revision(job_dir / "sync" / "logs.tar"), "rlkeep": rlkeep_revision()},
        "chain": [a["id"] for a in chain.get("attempts", [])],
        "retries_stopped": [s["id"] for s in retries.get("stopped", [])],
        "tracker_url": record.tracker_url,
        "steps": {name: info["status"] for name, info in steps.items()},
        "checkpoint": {key: selected.get(key) for key in ("step", "rule", "rationale")} if selected else None,
        "export": {"format": export.get("format"), "source": export.get("source"),
                   "files": export.get("files")} if export else None,
        "destinations": {
            "model": publish.get("model"), "model_commit": verify_model.get("commit"),
            "traces": publish.get("traces"), "traces_commit": verify_traces.get("commit"),
            "archive": verify_archive.get("dest"),
        } if record.publish or verify_archive.get("dest") else "not_applicable",
        "artifacts": model_artifacts(job_dir, record),
        "registration": register if register is not None else None,
        "metrics": sorted(f"metrics/{p.name}" for p in (job_dir / "metrics").glob("*") if p.is_file()),
        "verification": {name: (_optional_json(job_dir / "verify" / f"{name}.json") or {}).get("status")
                         if name in record.spec.verify_sentinels else "not_applicable"
                         for name in ("model_upload", "model", "traces", "archive")},
        "reclaimed": {"bytes": reclaim.get("deleted_bytes", 0), "keys": reclaim.get("deleted_keys", 0),
                      "status": reclaim.get("status"), "reason": reclaim.get("reason")},
        "remaining_work": remaining,
    }


def render_report(done: dict[str, Any]) -> str:
    lines = [f"# rlkeep completion record: {done['job']}", ""]
    lines.append(f"- Kind: {done.get('kind', 'rl')}")
    lines.append(f"- Terminal state: **{done['terminal_state']}**")
    lines.append(f"- Attempts: {', '.join(done.get('chain', []))}")
    if done.get("retries_stopped"):
        lines.append(f"- Pending retries stopped: {', '.join(done['retries_stopped'])}")
    lines.append(f"- Tracker: {done.get('tracker_url') or 'none recorded'}")
    revision = done.get("source_revision", {})
    lines.append(f"- Source revision: run {revision.get('run')}, rlkeep {revision.get('rlkeep')}")
    checkpoint = done.get("checkpoint")
    if checkpoint:
        lines += ["", "## Selected checkpoint", "", f"Step **{checkpoint['step']}**: {checkpoint['rationale']}"]
    export = done.get("export")
    if export:
        lines += ["", "## Export", "", f"Format {export.get('format')} from {export.get('source')}; "
                  f"{len(export.get('files') or [])} files with sha256 in export.json."]
    lines += ["", "## Model artifacts", "", "| artifact | state |", "|---|---|"]
    lines += [f"| {name} | {state} |" for name, state in (done.get("artifacts") or {}).items()]
    destinations = done.get("destinations")
    if isinstance(destinations, dict):
        lines += ["", "## Destinations", ""]
        lines += [f"- {key}: {value}" for key, value in destinations.items() if value]
    lines += ["", "## Steps", "", "| step | status |", "|---|---|"]
    lines += [f"| {name} | {status} |" for name, status in done["steps"].items()]
    reclaimed = done.get("reclaimed") or {}
    lines += ["", "## Storage reclaimed", "",
              f"{reclaimed.get('keys', 0)} objects, {reclaimed.get('bytes', 0):,} bytes"
              + (f" ({reclaimed['reason']})" if reclaimed.get("reason") else "")]
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


def build_status(job_dir: Path, kind: str | None = None) -> dict[str, Any]:
    steps = collect_steps(job_dir, kind)
    by_status: dict[str, list[str]] = {"completed": [], "not_applicable": [], "blocked": [], "pending": []}
    for name, info in steps.items():
        by_status.setdefault(info["status"], []).append(name)
    return {
        "job": job_dir.name,
        "kind": kind or "rl",
        "done": (job_dir / "DONE").is_file(),
        **by_status,
        "steps": steps,
        "remaining_work": [
            {"step": name, "status": info["status"], "reason": info.get("reason"), "remaining": info.get("remaining")}
            for name, info in steps.items()
            if info["status"] in {"blocked", "pending"}
        ],
    }


def _kind_of(record_file: Path) -> str | None:
    """The record's kind; None (rl's full list) when the record cannot be read: STATUS.json is then
    written with every step, and the record's own error stops the run."""
    from rlkeep.errors import RlkeepError
    from rlkeep.records import load_record

    try:
        return load_record(record_file).kind
    except RlkeepError:
        return None


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
        status = build_status(job_dir, _kind_of(record_file))
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
