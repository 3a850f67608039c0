"""The completion record `<job>/DONE`, `<job>/REPORT.md` and `<job>/STATUS.json`.

rlkeep.pipeline.STEPS is the one list of the pipeline's steps and the file that proves each one;
the `done` rule's inputs, DONE's `steps` and STATUS.json all come from it. Each step's status,
and for a step that has not run the failed ancestor that holds it back, is rlkeep.stepstate's.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from rlkeep.audit import damaged_steps, last_audit
from rlkeep.jsonio import read_json
from rlkeep.folderstate import remembered
from rlkeep.metrics import skipped_lines_markdown, without_metrics_markdown
from rlkeep.pipeline import STEP_BY_NAME, STEPS, Step, kind_has, verifications, verify_sentinels
from rlkeep.profiles import default_invocation, own_profile
from rlkeep.reclaim import awaits_authority
from rlkeep.records import JobRecord
from rlkeep.stepstate import collect_steps
from rlkeep.tracker import tracker_of


@functools.lru_cache(maxsize=1)
def rlkeep_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        result = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def terminal_state(chain: dict[str, Any], retries: dict[str, Any]) -> str:
    """The last attempt's state once this run's pending retries were stopped: as stop_retries found
    it (`states_now`: it may have ended since chain.json), else as chain.json has it."""
    attempts = chain.get("attempts", [])
    if not attempts:
        return "unknown"
    last = attempts[-1]
    stopped = {entry["id"]: entry["state_after"] for entry in retries.get("stopped", [])}
    if last["id"] in stopped:
        return f"{stopped[last['id']]} (pending retry stopped by rlkeep)"
    return str((retries.get("states_now") or {}).get(last["id"]) or last.get("state", "unknown"))


def _optional_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = read_json(path)
    return data if isinstance(data, dict) else None


REVISION_KEYS = ("source_revision", "git_sha", "git_commit", "git_revision", "commit_sha")


def run_source_revision(logs_tar: Path) -> str:
    """The training code's revision when the run recorded one in its resolved config; never guessed.
    Read out of logs.tar once per version of it (rlkeep.folderstate.remembered)."""
    if not logs_tar.is_file():
        return "not recorded"
    return remembered(logs_tar.parent.parent, "source_revision", logs_tar, list(REVISION_KEYS),
                      lambda: _source_revision_in(logs_tar))


def _source_revision_in(logs_tar: Path) -> str:
    import re
    import tarfile

    pattern = re.compile(rb"^\s*(?:" + b"|".join(k.encode() for k in REVISION_KEYS) + rb")\s*:\s*['\"]?([0-9a-f]{7,40})\b", re.M)
    with tarfile.open(logs_tar) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(("resolved_config.yaml", "config.yaml")) and member.size < 4 << 20:
                handle = tar.extractfile(member)
                match = pattern.search(handle.read()) if handle else None
                if match:
                    return f"{match.group(1).decode()} ({member.name})"
    return "not recorded"


ARTIFACTS: tuple[str, ...] = ("weights", "tokenizer_configuration", "training_logs", "training_traces_link")
# The steps each model artifact waits on, in pipeline order: an absent artifact's reason is the
# first of them that is not completed (the runbook: the card links the traces once they are verified).
ARTIFACT_STEPS: dict[str, tuple[str, ...]] = {
    "weights": ("list_checkpoints", "metric_surface", "select_checkpoint", "export_model", "publish_model"),
    "tokenizer_configuration": ("list_checkpoints", "metric_surface", "select_checkpoint", "export_model",
                                "publish_model"),
    "training_logs": ("sync_logs", "metric_surface", "export_model", "publish_model"),
    "training_traces_link": ("sync_traces", "publish_traces", "publish_model", "link_model_card"),
}


def blocking_reason(steps: dict[str, dict[str, Any]], names: tuple[str, ...]) -> str | None:
    """`<step> <status>: <reason>` for the first of names that is not completed, or None."""
    for name in names:
        info = steps.get(name, {"status": "pending"})
        if info["status"] in {"completed", "not_applicable"}:
            continue
        reason = (info.get("reason") or "").strip().splitlines()
        return f"{name} {info['status']}" + (f": {reason[0]}" if reason else "")
    return None


def _completed(path: Path) -> bool:
    return (_optional_json(path) or {}).get("status") == "completed"


def artifact_table(job_dir: Path, record: JobRecord, steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """present | absent | not_applicable for each required model artifact (runbook completion
    record), the reason of each absent one, and what the table describes (scope).

    verify/model_upload.json: a fresh download of the model passed every check but the card's
    trace link; verify/model.json: the card links the verified trace dataset and every check
    passed again. Both are checks of the Hub copy, so they outrank the local folders."""
    if not kind_has(record.kind, "export_model"):  # sft, datagen, eval: rlkeep makes no model
        return {"artifacts": {key: "not_applicable" for key in ARTIFACTS}, "reasons": {},
                "scope": f"a {record.spec.name} run has no model"}
    if record.publish is not None and _completed(job_dir / "verify" / "model_upload.json"):
        linked = _completed(job_dir / "verify" / "model.json")
        states = {key: "present" for key in ARTIFACTS}
        reasons = {}
        if not linked:
            states["training_traces_link"] = "absent"
            reasons["training_traces_link"] = (blocking_reason(steps, ARTIFACT_STEPS["training_traces_link"])
                                               or "link_model_card pending")
        return {"artifacts": states, "reasons": reasons,
                "scope": f"published model {record.publish.get('model')} (verified fresh download)"}
    model = job_dir / "model"
    exported = (job_dir / "export.json").is_file()
    states = {
        "weights": "present" if exported and any(model.glob("*.safetensors")) else "absent",
        "tokenizer_configuration": "present" if exported and (model / "config.json").is_file() and any(
            (model / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json"))
        else "absent",
    }
    if record.publish is None:
        states.update(training_logs="not_applicable", training_traces_link="not_applicable")
        scope = "local export (the record names no publish destinations)"
    else:
        staged_logs = job_dir / "stage" / "model" / "training_logs"
        states["training_logs"] = "present" if staged_logs.is_dir() and any(staged_logs.iterdir()) else "absent"
        states["training_traces_link"] = "absent"
        scope = ("local export and staging; the model is not published yet ("
                 + (blocking_reason(steps, ("publish_model",)) or "publish_model pending") + ")")
    reasons = {}
    for key, state in states.items():
        if state == "absent":
            reasons[key] = blocking_reason(steps, ARTIFACT_STEPS[key]) or "not found in the job folder"
    if record.publish is not None and "traces" not in record.publish and "training_traces_link" in reasons:
        reasons["training_traces_link"] = "the record names no trace dataset (publish.traces)"
    return {"artifacts": states, "reasons": reasons, "scope": scope}


def attempts_without_metrics(job_dir: Path) -> list[dict[str, Any]] | None:
    """The chain's attempts that logged no metrics (metrics/attempts.json). Before the surface is
    built, only the empty logs are known (logs.manifest.json); None when neither exists."""
    attempts = _optional_json(job_dir / "metrics" / "attempts.json")
    if attempts is not None:
        return list(attempts.get("attempts_without_metrics") or [])
    manifest = _optional_json(job_dir / "sync" / "logs.manifest.json")
    if manifest is None:
        return None
    return [{"attempt": a["attempt"], "reason": "empty", "state": a.get("state"), "bytes": a.get("bytes"),
             "lines": a.get("lines")} for a in manifest.get("attempts", []) if a.get("member") and a.get("bytes") == 0]


def skipped_log_lines(job_dir: Path) -> dict[str, Any] | None:
    """The unparsable metric lines the surface skipped (metrics/attempts.json); None before it exists."""
    attempts = _optional_json(job_dir / "metrics" / "attempts.json")
    return None if attempts is None else attempts.get("skipped_lines", {"count": 0, "by_attempt": {}, "named": []})


def complete_candidates(job_dir: Path) -> list[int] | None:
    data = _optional_json(job_dir / "checkpoint" / "candidates.json")
    if data is None:
        return None
    return sorted(int(c["step"]) for c in data.get("candidates", []) if isinstance(c, dict) and c.get("complete", True))


def build_completion_record(job_dir: Path, record: JobRecord,
                            steps: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the completion record states; every input file is optional, so a blocked run
    gets the same record (STATUS.json) with what is known."""
    steps = steps if steps is not None else collect_steps(job_dir, record.kind, record.publish)
    chain = _optional_json(job_dir / "chain.json") or {}
    retries = _optional_json(job_dir / "retries.json") or {}
    selected = _optional_json(job_dir / "checkpoint" / "selected.json") or {}
    export = _optional_json(job_dir / "export.json") or {}
    verify_model = (_optional_json(job_dir / "verify" / "model.json")
                    or _optional_json(job_dir / "verify" / "model_upload.json") or {})
    verify_traces = _optional_json(job_dir / "verify" / "traces.json") or {}
    verify_archive = _optional_json(job_dir / "verify" / "archive.json") or {}
    verify_steps = {step.verify: step.name for step in STEPS if step.verify}
    register = _optional_json(job_dir / "register.json")
    reclaim = _optional_json(job_dir / "reclaim.json") or {}
    remaining = [
        {"step": name, "status": info["status"], "remaining": info.get("remaining", "")}
        for name, info in steps.items()
        if info["status"] not in {"completed", "not_applicable"}
    ]
    if awaits_authority(reclaim):  # not_applicable as a step, yet the sources are still there to reclaim
        remaining.append({"step": "reclaim", "status": "awaiting_authority",
                          "remaining": f"the run's source storage ({record.store}) is kept: reclaim it once you "
                                       "decide to, by granting the authority for exactly this job",
                          "command": grant_command(record.job, "reclaim", default_invocation())})
    publish = record.publish or {}

    tracker_url, tracker_url_source = tracker_of(record, job_dir)  # the record's URL always wins
    archive_dest = verify_archive.get("dest") or (record.archive or {}).get("dest")
    table = artifact_table(job_dir, record, steps)
    return {
        "job": record.job,
        "kind": record.kind,
        "terminal_state": terminal_state(chain, retries) if chain else "unknown (chain.json not captured)",
        "source_revision": {"run": run_source_revision(job_dir / "sync" / "logs.tar"), "rlkeep": rlkeep_revision()},
        "chain": [a["id"] for a in chain.get("attempts", [])] or list(record.chain),
        "retries_stopped": [s["id"] for s in retries.get("stopped", [])],
        # the operator's decision (record chain_excludes) as the chain capture recorded it
        "chain_excludes": chain.get("chain_excludes", []),
        "tracker_url": tracker_url,
        "tracker_url_source": tracker_url_source,
        "steps": {name: info["status"] for name, info in steps.items()},
        "checkpoint": {key: selected.get(key) for key in ("step", "rule", "rationale")} if selected else None,
        "candidates": complete_candidates(job_dir),
        "export": {"format": export.get("format"), "source": export.get("source"),
                   "files": export.get("files")} if export else None,
        "destinations": {
            "model": publish.get("model"), "model_commit": verify_model.get("commit"),
            "model_url": verify_model.get("url"),  # where the verification found it: the Hub it went to
            "traces": publish.get("traces"), "traces_commit": verify_traces.get("commit"),
            "traces_url": verify_traces.get("url"),
            "archive": archive_dest,
        } if record.publish or archive_dest else "not_applicable",
        "artifacts": table["artifacts"],
        "artifact_reasons": table["reasons"],
        "artifacts_scope": table["scope"],
        "attempts_without_metrics": attempts_without_metrics(job_dir),
        "skipped_log_lines": skipped_log_lines(job_dir),
        "registration": register if register is not None else None,
        "metrics": sorted(f"metrics/{p.name}" for p in (job_dir / "metrics").glob("*") if p.is_file()),
        "verification": {name: ((_optional_json(job_dir / "verify" / f"{name}.json") or {}).get("status")
                                or steps.get(verify_steps[name], {}).get("status"))
                         if name in verify_sentinels(record.kind) else "not_applicable"
                         for name in verifications()},
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
    if done.get("chain_excludes"):
        lines.append("- Not attempts of this run (the record's chain_excludes): " + ", ".join(
            f"{entry['id']} ({entry['state'] or 'not listed'})" for entry in done["chain_excludes"]))
    source = done.get("tracker_url_source")
    lines.append(f"- Tracker: {done.get('tracker_url') or 'none recorded'}" + (
        f" (printed in the trainer log of attempt {source['attempt']}, line {source['line']})" if isinstance(source, dict) else ""))
    revision = done.get("source_revision", {})
    lines.append(f"- Source revision: run {revision.get('run')}, rlkeep {revision.get('rlkeep')}")
    checkpoint = done.get("checkpoint")
    if checkpoint:
        lines += ["", "## Selected checkpoint", "", f"Step **{checkpoint['step']}**: {checkpoint['rationale']}"]
    elif done.get("candidates") is not None:
        lines += ["", "## Checkpoint candidates", "", "Not selected yet; complete saves: "
                  + (", ".join(str(step) for step in done["candidates"]) or "none")]
    export = done.get("export")
    if export:
        lines += ["", "## Export", "", f"Format {export.get('format')} from {export.get('source')}; "
                  f"{len(export.get('files') or [])} files with sha256 in export.json."]
    lines += ["", "## Model artifacts", ""]
    if done.get("artifacts_scope"):
        lines += [f"Scope: {done['artifacts_scope']}.", ""]
    lines += ["| artifact | state | reason |", "|---|---|---|"]
    reasons = done.get("artifact_reasons") or {}
    lines += [f"| {name} | {state} | {reasons.get(name, '')} |" for name, state in (done.get("artifacts") or {}).items()]
    destinations = done.get("destinations")
    if isinstance(destinations, dict):
        lines += ["", "## Destinations", ""]
        lines += [f"- {key}: {value}" for key, value in destinations.items() if value]
    dead = done.get("attempts_without_metrics")
    if dead:
        lines += [""] + without_metrics_markdown(dead)
        lines.pop()
    skipped = skipped_lines_markdown(done.get("skipped_log_lines"))
    if skipped:
        lines += [""] + skipped[:-1]
    lines += ["", "## Steps", "", "| step | status |", "|---|---|"]
    lines += [f"| {name} | {status} |" for name, status in done["steps"].items()]
    reclaimed = done.get("reclaimed") or {}
    lines += ["", "## Storage reclaimed", "",
              f"{reclaimed.get('keys', 0)} objects, {reclaimed.get('bytes', 0):,} bytes"
              + (f" ({reclaimed['reason']})" if reclaimed.get("reason") else "")]
    lines += ["", "## Remaining work", ""]
    if done["remaining_work"]:
        lines += [f"- {item['step']} ({item['status']}): {item['remaining']}"
                  + (f" {'Grant it with' if item['status'] == 'awaiting_authority' else 'Continue with'}: "
                     f"`{item['command']}`" if item.get("command") else "")
                  for item in done["remaining_work"]]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


# Steps that act only with authority granted on the command line (docs/contract.md §6).
AUTHORITY = {"reclaim": "reclaim_authorized"}


def continue_command(job: str, step: Step | None, invocation: str) -> str:
    """The command that reruns a step (and whatever it waits on) from the data root."""
    target = f"{job}/{step.evidence}" if step is not None else f"{job}/DONE"
    command = f"{invocation} {target}"
    if step is not None and step.forcerun:  # --forcerun and --config take every word after them: never both
        command += f" --forcerun {' '.join(step.forcerun)}"
    if step is not None and step.name in AUTHORITY:
        command += f" --config {AUTHORITY[step.name]}={job}"
    return command


def grant_command(job: str, name: str, invocation: str) -> str:
    """The command that grants a step's authority for exactly this job and brings DONE up to date
    (docs/contract.md §6: targets before --config)."""
    return f"{invocation} {job}/DONE --config {AUTHORITY[name]}={job}"


def disk_need(job_dir: Path) -> dict[str, Any] | None:
    """What the run holds on the data root at its peak, as the syncs computed it from the store
    listing before their first byte (rlkeep.diskspace.run_space_need); None before that."""
    for name in ("sync/logs.manifest.json", "sync/trace_jobs.manifest.json"):
        try:
            space = read_json(job_dir / name).get("space")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(space, dict):
            return space
    return None


def build_status(job_dir: Path, kind: str | None = None, *, record: JobRecord | None = None,
                 invocation: str | None = None) -> dict[str, Any]:
    """STATUS.json: every step's status and, when the record is readable, everything DONE would
    state (the completion record of a blocked run), with the command that continues each step."""
    invocation = invocation or default_invocation()
    kind = record.kind if record is not None else kind
    steps = collect_steps(job_dir, kind, *(() if record is None else (record.publish,)))
    repairs = _mark_damaged(job_dir, steps, invocation)
    by_status: dict[str, list[str]] = {"completed": [], "not_applicable": [], "blocked": [], "pending": []}
    for name, info in steps.items():
        by_status.setdefault(info["status"], []).append(name)
    remaining = [
        {"step": name, "status": info["status"], "reason": info.get("reason"), "remaining": info.get("remaining"),
         **({"blocked_by": info["blocked_by"]} if "blocked_by" in info else {}),
         # a step held by a failed ancestor continues once that ancestor does: its command
         "command": info.get("repair") or continue_command(job_dir.name, STEP_BY_NAME[info.get("blocked_by", name)],
                                                           invocation)}
        for name, info in steps.items()
        if info["status"] in {"blocked", "pending"}
    ]
    record_fields = {}
    if record is not None:
        record_fields = {key: value for key, value in build_completion_record(job_dir, record, steps).items()
                         if key not in {"steps", "remaining_work"}}
    return {
        "job": job_dir.name,
        "kind": kind or "rl",
        "done": (job_dir / "DONE").is_file(),
        **by_status,
        **record_fields,
        "steps": steps,
        "audit": last_audit(job_dir),  # rlkeep audit's last verify/audit.json, summarised
        "remaining_work": remaining,
        "continue": (" && ".join(repairs) if repairs else continue_command(job_dir.name, None, invocation))
        if remaining else None,
        "disk": disk_need(job_dir),
    }


def _mark_damaged(job_dir: Path, steps: dict[str, dict[str, Any]], invocation: str) -> list[str]:
    """After DONE, a step whose output DONE relies on is missing or changed is `blocked`, naming
    the file and the command that brings it back (rlkeep.audit): Snakemake itself would find
    nothing to do for a missing intermediate whose consumers are up to date. Returns the commands."""
    if not (job_dir / "DONE").is_file():
        return []

    repairs: list[str] = []
    for name, finding in damaged_steps(job_dir, invocation).items():
        if name not in steps:
            continue
        steps[name] = {"status": "blocked", "reason": f"{finding.subject}: {finding.problem}",
                       "damaged": finding.subject, "log": None, "repair": finding.repair,
                       "remaining": "bring it back with the command; its content is what DONE describes, so DONE "
                                    "stays as it is"}
        if finding.repair and finding.repair not in repairs:
            repairs.append(finding.repair)
    return repairs


def invocation_from_argv(argv: list[str]) -> str:
    """`snakemake [--snakefile F] --profile P` as this run was invoked (default profile: iris)."""
    import shlex

    def value(flag: str) -> str | None:
        for index, arg in enumerate(argv):
            if arg == flag and index + 1 < len(argv):
                return argv[index + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    parts = ["snakemake"]
    snakefile = value("--snakefile") or value("-s")
    if snakefile:
        parts += ["--snakefile", snakefile]
    parts += ["--profile", value("--profile") or own_profile("iris")]
    return shlex.join(parts)
