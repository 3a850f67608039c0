"""What the campaign pages show of each record, read from local files only: the record's STATUS
(as rlkeep.report.build_status computes it now), the job folder's own files, its metric and
generation tables, and the storage and destination facts derived from them. No HTML here.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlkeep.campaign.digest import run_state
from rlkeep.errors import RlkeepError
from rlkeep.profiles import default_invocation
from rlkeep.generation_stats import read_tables
from rlkeep.jsonio import read_json
from rlkeep.metrics import read_metrics_csv
from rlkeep.records import RecordRefused, load_record
from rlkeep.report import build_status
from rlkeep.urls import join_url

DEFAULT_HUB = "https://huggingface.co"


@dataclass
class RunView:
    """What the campaign shows of one record: its STATUS (as build_status computes it now) and
    the job folder's own files the run page summarises."""

    job: str
    overall: str  # done | blocked | in_progress | not_started | unreadable
    status: dict[str, Any]
    started: bool
    record_error: str | None = None
    record_refused: bool = False  # the record reads as YAML and validation refuses it
    files: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # from the record: user, base_model, text as written


def _json_or_none(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except (ValueError, OSError):
        return None


def overall_state(status: dict[str, Any], started: bool) -> str:
    return run_state(status, started)[0]


def load_run(data_root: Path, record_file: Path, invocation: str | None = None) -> RunView:
    """The view of one record; a record that does not load is shown with its error, never skipped."""

    job = record_file.stem
    job_dir = data_root / job
    record = None
    record_error = None
    refused = False
    try:
        record = load_record(record_file)
    except RlkeepError as error:
        record_error, refused = str(error), isinstance(error, RecordRefused)
    status = build_status(job_dir, record=record, invocation=invocation)
    started = job_dir.is_dir()
    files = {
        "chain": _json_or_none(job_dir / "chain.json"),
        "retries": _json_or_none(job_dir / "retries.json"),
        "candidates": _json_or_none(job_dir / "checkpoint" / "candidates.json"),
        "selected": _json_or_none(job_dir / "checkpoint" / "selected.json"),
        "attempts": _json_or_none(job_dir / "metrics" / "attempts.json"),
        "logs_manifest": _json_or_none(job_dir / "sync" / "logs.manifest.json"),
        "traces_manifest": _json_or_none(job_dir / "sync" / "trace_jobs.manifest.json"),
        "reclaim": _json_or_none(job_dir / "reclaim.json"),
        "export": _json_or_none(job_dir / "export.json"),
        "done_at": _done_at(job_dir / "DONE"),
        "chain_captured": _mtime(job_dir / "chain.json"),
        "archive_manifest": _read_text(job_dir / "archive" / "MANIFEST"),
        "verify": {p.stem: _json_or_none(p) for p in sorted((job_dir / "verify").glob("*.json"))},
        "figures": sorted(str(p.relative_to(job_dir)) for p in (job_dir / "metrics").glob("*.png")),
        # STATUS.json is written with the page (rlkeep.campaign.writer): there for every started job
        "local": sorted([*(str(p.relative_to(job_dir)) for pattern in
                           ("REPORT.md", "DONE", "chain.json", "metrics/report.md", "metrics/trials.md",
                            "metrics/generation.md", "metrics/metrics.csv", "archive/MANIFEST")
                           for p in job_dir.glob(pattern) if p.is_file()),
                         *(["STATUS.json"] if started else [])]),
    }
    files["metric_rows"], files["trial_rows"], files["table_errors"] = _tables(job_dir)
    files["generation"] = _generation_tables(job_dir, files["table_errors"])
    facts = {"user": record.user if record else None, "base_model": record.base_model if record else None,
             "text": _read_text(record_file, 64 << 10)}
    return RunView(job=job, overall=run_state(status, started, record_error, refused)[0], status=status,
                   started=started, record_error=record_error, files=files, facts=facts, record_refused=refused)


def _tables(job_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[str]]:
    """metrics/metrics.csv rows, metrics/trials.csv rows (None without a trial table) and why a
    file could not be read: a malformed table is named on the page, never a reason to skip the page."""
    metrics_csv = job_dir / "metrics" / "metrics.csv"
    trials_csv = job_dir / "metrics" / "trials.csv"
    rows: list[dict[str, Any]] = []
    trials = None
    errors = []
    try:
        rows = read_metrics_csv(metrics_csv) if metrics_csv.is_file() else []
    except (RlkeepError, ValueError, OSError) as error:
        errors.append(str(error))
    try:
        if trials_csv.is_file():
            with trials_csv.open(newline="", encoding="utf-8") as handle:
                trials = list(csv.DictReader(handle))
    except (ValueError, OSError, csv.Error) as error:
        errors.append(f"{trials_csv}: {error}")
    return rows, trials, errors


def _generation_tables(job_dir: Path, errors: list[str]) -> dict[str, Any]:
    """metrics/vllm.csv and batch_errors.csv rows (None when generation_stats has not run)."""
    try:
        return read_tables(job_dir)
    except (ValueError, OSError, csv.Error) as error:
        errors.append(f"{job_dir / 'metrics'}: generation tables: {error}")
        return {"vllm": None, "batch_errors": None}


def _done_at(path: Path) -> str | None:
    done = _json_or_none(path)
    return done.get("completed_at") if isinstance(done, dict) else None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _read_text(path: Path, limit: int = 1 << 20) -> str | None:
    if not path.is_file():
        return None
    return path.read_bytes()[:limit].decode("utf-8", "replace")


def load_campaign(data_root: Path, records_dir: Path, invocation: str | None = None) -> list[RunView]:
    records_dir = records_dir if records_dir.is_absolute() else data_root / records_dir
    if not records_dir.is_dir():
        return []
    invocation = invocation or default_invocation()
    return [load_run(data_root, path, invocation) for path in sorted(records_dir.glob("*.yaml"))]


def storage_bytes(view: RunView) -> dict[str, int | None]:
    """preserved: bytes the sync copied into the job folder's tarballs (what the archive keeps);
    reclaimed: bytes reclaim deleted from the store; reclaimable: what reclaim's plan still covers,
    i.e. the objects the sync manifests list (synced + skipped, reclaim's plan) minus what it deleted,
    or planned minus deleted once an authorized reclaim ran. None when not known yet."""
    preserved = listed = None
    for name in ("logs_manifest", "traces_manifest"):
        manifest = view.files.get(name)
        if isinstance(manifest, dict) and isinstance(manifest.get("bytes"), int):
            preserved = (preserved or 0) + manifest["bytes"]
            skipped = sum(int(o.get("size") or 0) for o in manifest.get("objects_skipped") or [] if isinstance(o, dict))
            listed = (listed or 0) + manifest["bytes"] + skipped
    reclaim = view.files.get("reclaim") if isinstance(view.files.get("reclaim"), dict) else {}
    reclaimed = int(reclaim.get("deleted_bytes") or 0)
    planned = reclaim.get("planned_bytes") if reclaim.get("status") == "completed" else listed
    reclaimable = max(int(planned) - reclaimed, 0) if isinstance(planned, (int, float)) else None
    return {"preserved": preserved, "reclaimed": reclaimed, "reclaimable": reclaimable}


def hub_url(repo_id: str, repo_type: str = "model", endpoint: str | None = None) -> str:
    prefix = "datasets" if repo_type == "dataset" else ""
    return join_url(endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_HUB, prefix, quote(repo_id, safe="/"))


def published_url(verify: dict[str, Any] | None, sentinel: str, repo_id: str) -> str | None:
    """The URL the verification recorded for repo_id (the Hub it was published to), when it did."""
    evidence = (verify or {}).get(sentinel)
    if isinstance(evidence, dict) and evidence.get("repo_id", repo_id) == repo_id and isinstance(evidence.get("url"), str):
        return evidence["url"]
    return None


def destination_links(status: dict[str, Any], endpoint: str | None = None,
                      verify: dict[str, Any] | None = None) -> list[tuple[str, str, str | None]]:
    """(label, text, href or None) for each destination and the tracker. A published repo links to
    the URL its verification recorded (the Hub it went to); otherwise to the Hub in use."""
    links: list[tuple[str, str, str | None]] = []
    destinations = status.get("destinations")
    if isinstance(destinations, dict):
        if destinations.get("model"):
            model = destinations["model"]
            links.append(("model", model, published_url(verify, "model_upload", model) or hub_url(model, "model", endpoint)))
        if destinations.get("traces"):
            traces = destinations["traces"]
            links.append(("traces", traces,
                          published_url(verify, "traces", traces) or hub_url(traces, "dataset", endpoint)))
        if destinations.get("archive"):
            links.append(("archive", destinations["archive"], None))  # s3://: not a browser link
    tracker = status.get("tracker_url")
    if tracker:
        href = tracker if str(tracker).startswith(("https://", "http://")) else None
        links.append(("tracker", tracker, href))
    return links
