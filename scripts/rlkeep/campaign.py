"""The campaign view: `campaign/index.html` (one row per record) and `campaign/<job>.html`.

Pure builders (job folders -> data -> HTML strings) and one thin writer. Everything is read from
local files (the records and the job folders, through rlkeep.report.build_status), nothing from the
network, so the pages are cheap to rebuild after every invocation. The pages are self-contained:
inline CSS, an optional inline script (sorting and filtering; the tables read the same without it),
figures as PNG data URIs. Every value written into HTML goes through `esc`.
"""
from __future__ import annotations

import base64
import html
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.metrics import read_metrics_csv
from rlkeep.pipeline import STEPS
from rlkeep.records import load_record
from rlkeep.report import build_status, rlkeep_revision
from rlkeep.run_report import html_sections, panels

STEP_STATES = ("completed", "blocked", "pending", "not_applicable")
DEFAULT_HUB = "https://huggingface.co"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# --------------------------------------------------------------------------- data


@dataclass
class RunView:
    """What the campaign shows of one record: its STATUS (as build_status computes it now) and
    the job folder's own files the run page summarises."""

    job: str
    overall: str  # done | blocked | in_progress | not_started | unreadable
    status: dict[str, Any]
    started: bool
    record_error: str | None = None
    files: dict[str, Any] = field(default_factory=dict)


def _json_or_none(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except (ValueError, OSError):
        return None


def overall_state(status: dict[str, Any], started: bool) -> str:
    if status.get("done"):
        return "done"
    steps = status.get("steps") or {}
    if any(info.get("status") == "blocked" for info in steps.values()):
        return "blocked"
    if not started:
        return "not_started"
    return "in_progress"


def load_run(data_root: Path, record_file: Path, invocation: str = "snakemake --profile iris") -> RunView:
    """The view of one record; a record that does not load is shown with its error, never skipped."""

    job = record_file.stem
    job_dir = data_root / job
    record = None
    record_error = None
    try:
        record = load_record(record_file)
    except RlkeepError as error:
        record_error = str(error)
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
        "archive_manifest": _read_text(job_dir / "archive" / "MANIFEST"),
        "verify": {p.stem: _json_or_none(p) for p in sorted((job_dir / "verify").glob("*.json"))},
        "figures": sorted(str(p.relative_to(job_dir)) for p in (job_dir / "metrics").glob("*.png")),
        "local": sorted(str(p.relative_to(job_dir)) for pattern in
                        ("REPORT.md", "STATUS.json", "DONE", "chain.json", "metrics/report.md", "metrics/trials.md",
                         "metrics/generation.md", "metrics/metrics.csv", "archive/MANIFEST")
                        for p in job_dir.glob(pattern) if p.is_file()),
    }
    files["metric_rows"], files["trial_rows"], files["table_errors"] = _tables(job_dir)
    files["generation"] = _generation_tables(job_dir, files["table_errors"])
    view = RunView(job=job, overall="unreadable" if record_error else overall_state(status, started),
                   status=status, started=started, record_error=record_error, files=files)
    return view


def _tables(job_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[str]]:
    """metrics/metrics.csv rows, metrics/trials.csv rows (None without a trial table) and why a
    file could not be read: a malformed table is named on the page, never a reason to skip the page."""
    import csv

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
    import csv

    from rlkeep.generation_stats import read_tables

    try:
        return read_tables(job_dir)
    except (ValueError, OSError, csv.Error) as error:
        errors.append(f"{job_dir / 'metrics'}: generation tables: {error}")
        return {"vllm": None, "batch_errors": None}


def generation_html(tables: dict[str, Any]) -> str:
    """The vLLM utilisation and batch errors sections (rlkeep.run_report), or why they are absent."""
    from rlkeep.run_report import batch_error_sections, render_html, vllm_sections

    vllm, errors = tables.get("vllm"), tables.get("batch_errors")
    if vllm is None and errors is None:
        return ("<h3>vLLM utilisation and batch errors</h3><p>Not available: generation_stats has not run "
                "(metrics/vllm.csv and metrics/batch_errors.csv are absent).</p>")
    columns = list(errors[0].keys()) if errors else []
    return render_html(vllm_sections(vllm or []) + batch_error_sections(columns, errors or []))


def _read_text(path: Path, limit: int = 1 << 20) -> str | None:
    if not path.is_file():
        return None
    return path.read_bytes()[:limit].decode("utf-8", "replace")


def load_campaign(data_root: Path, records_dir: Path, invocation: str = "snakemake --profile iris") -> list[RunView]:
    records_dir = records_dir if records_dir.is_absolute() else data_root / records_dir
    if not records_dir.is_dir():
        return []
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
    base = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_HUB).rstrip("/")
    prefix = "datasets/" if repo_type == "dataset" else ""
    return f"{base}/{prefix}{quote(repo_id, safe='/')}"


def destination_links(status: dict[str, Any], endpoint: str | None = None) -> list[tuple[str, str, str | None]]:
    """(label, text, href or None) for each destination and the tracker."""
    links: list[tuple[str, str, str | None]] = []
    destinations = status.get("destinations")
    if isinstance(destinations, dict):
        if destinations.get("model"):
            links.append(("model", destinations["model"], hub_url(destinations["model"], "model", endpoint)))
        if destinations.get("traces"):
            links.append(("traces", destinations["traces"], hub_url(destinations["traces"], "dataset", endpoint)))
        if destinations.get("archive"):
            links.append(("archive", destinations["archive"], None))  # s3://: not a browser link
    tracker = status.get("tracker_url")
    if tracker:
        href = tracker if str(tracker).startswith(("https://", "http://")) else None
        links.append(("tracker", tracker, href))
    return links


# --------------------------------------------------------------------------- HTML pieces

CSS = """
:root{--fg:#1a1a1a;--muted:#4a4a4a;--line:#c8c8c8;--bg:#fff}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:1.5rem}
h1{font-size:1.4rem;margin:0 0 .5rem}h2{font-size:1.1rem;margin:1.5rem 0 .5rem}
table{border-collapse:collapse;margin:.5rem 0}caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid var(--line);padding:.25rem .4rem;vertical-align:top;text-align:left}
thead th{background:#ececec}th.step{font-size:11px;font-weight:600;max-width:6rem}
td.st{font-size:11px;max-width:7rem}
td.wide{min-width:16rem}td.dest{min-width:13rem}
.st-completed{background:#d7f0d9;color:#0b4d12}.st-blocked{background:#fbd5d5;color:#7a0b0b}
.st-pending{background:#fff1c2;color:#5c4300}.st-not_applicable{background:#eeeeee;color:#3d3d3d}
.ov-done{background:#d7f0d9;color:#0b4d12}.ov-blocked{background:#fbd5d5;color:#7a0b0b}
.ov-in_progress{background:#fff1c2;color:#5c4300}.ov-not_started,.ov-unreadable{background:#eeeeee;color:#3d3d3d}
.reason{display:block;font-size:11px;white-space:pre-wrap;max-width:22rem}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f3f3f3;padding:0 .2rem;overflow-wrap:anywhere}
a{color:#0645ad}footer{margin-top:2rem;color:var(--muted);font-size:12px}
.legend span{display:inline-block;padding:0 .4rem;margin-right:.3rem}
#controls{margin:.5rem 0}button.sort{font:inherit;background:none;border:0;padding:0;cursor:pointer;text-decoration:underline;color:inherit}
figure{margin:.5rem 0}img{max-width:100%;height:auto;border:1px solid var(--line)}
"""

SCRIPT = """
(function(){
  var table=document.getElementById('runs'); if(!table) return;
  var body=table.tBodies[0];
  var select=document.getElementById('state-filter'); var controls=document.getElementById('controls');
  controls.hidden=false;
  select.addEventListener('change',function(){
    var want=select.value;
    Array.prototype.forEach.call(body.rows,function(row){row.hidden=!!want&&row.getAttribute('data-state')!==want;});
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,index){
    var button=th.querySelector('button.sort'); if(!button) return;
    button.addEventListener('click',function(){
      var ascending=th.getAttribute('aria-sort')!=='ascending';
      Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.removeAttribute('aria-sort');});
      th.setAttribute('aria-sort',ascending?'ascending':'descending');
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=a.cells[index].getAttribute('data-sort')||a.cells[index].textContent;
        var y=b.cells[index].getAttribute('data-sort')||b.cells[index].textContent;
        var nx=parseFloat(x),ny=parseFloat(y);
        var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return ascending?c:-c;
      });
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
})();
"""


def page(title: str, body: str, *, generated_at: str, revision: str, script: str = "") -> str:
    scripts = f"<script>{script}</script>" if script else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"{body}<footer>Made {esc(generated_at)} by rlkeep revision <code>{esc(revision)}</code> from the local "
        "records and job folders; rebuilt at the end of every rlkeep invocation.</footer>"
        f"{scripts}</body></html>\n"
    )


def human_bytes(value: int | None) -> str:
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def step_cell(name: str, info: dict[str, Any]) -> str:
    """One coloured cell: the status as text, the reason (or what remains) in the title and in text."""
    state = info.get("status", "pending")
    reason = info.get("reason") or ""
    if state == "pending" and not reason:
        reason = info.get("remaining") or ""
    first_line = reason.strip().splitlines()[0] if reason.strip() else ""
    title = f"{name}: {state}" + (f": {reason.strip()}" if reason.strip() else "")
    text = f"<span class=\"reason\">{esc(first_line)}</span>" if state == "blocked" and first_line else ""
    css_state = state if state in STEP_STATES else "pending"
    return (f"<td class=\"st st-{esc(css_state)}\" data-step=\"{esc(name)}\" data-status=\"{esc(state)}\" "
            f"title=\"{esc(title)}\">{esc(state.replace('_', ' '))}{text}</td>")


def _links_html(links: list[tuple[str, str, str | None]]) -> str:
    if not links:
        return "none"
    parts = []
    for label, text, href in links:
        shown = f"<a href=\"{esc(href)}\">{esc(text)}</a>" if href else f"<code>{esc(text)}</code>"
        parts.append(f"{esc(label)}: {shown}")
    return "<br>".join(parts)


def blocked_command(status: dict[str, Any]) -> str | None:
    """The command that continues the run, when a step is blocked or pending."""
    return status.get("continue") if status.get("remaining_work") else None


def run_row(view: RunView, endpoint: str | None = None) -> str:
    status = view.status
    storage = storage_bytes(view)
    checkpoint = status.get("checkpoint") or {}
    steps = status.get("steps") or {}
    cells = [
        f"<th scope=\"row\" data-sort=\"{esc(view.job)}\"><a href=\"{esc(quote(view.job))}.html\">{esc(view.job)}</a></th>",
        f"<td>{esc(status.get('kind', 'rl'))}</td>",
        f"<td class=\"ov-{esc(view.overall)}\">{esc(view.overall.replace('_', ' '))}</td>",
        f"<td>{esc(status.get('terminal_state', 'unknown'))}</td>",
    ]
    cells += [step_cell(step.name, steps.get(step.name, {"status": "pending"})) for step in STEPS]
    cells.append(f"<td data-sort=\"{esc(checkpoint.get('step', -1))}\">"
                 f"{esc(checkpoint.get('step')) if checkpoint else 'not selected'}</td>")
    cells.append(f"<td class=\"dest\">{_links_html(destination_links(status, endpoint))}</td>")
    for key in ("preserved", "reclaimed", "reclaimable"):
        value = storage[key]
        cells.append(f"<td data-sort=\"{-1 if value is None else value}\">{esc(human_bytes(value))}</td>")
    command = blocked_command(status)
    blocked = [f"{name}: {info.get('reason', '').strip().splitlines()[0]}" for name, info in steps.items()
               if info.get("status") == "blocked" and (info.get("reason") or "").strip()]
    next_cell = ""
    if view.record_error:
        next_cell = f"<span class=\"reason\">record error: {esc(view.record_error)}</span>"
    if blocked:
        next_cell += "".join(f"<span class=\"reason\">{esc(line)}</span>" for line in blocked)
    if command:
        next_cell += f"<code class=\"continue\">{esc(command)}</code>"
    cells.append(f"<td class=\"wide\">{next_cell or 'nothing'}</td>")
    return f"<tr data-job=\"{esc(view.job)}\" data-state=\"{esc(view.overall)}\">{''.join(cells)}</tr>"


def index_html(views: list[RunView], *, generated_at: str, revision: str, endpoint: str | None = None) -> str:
    def sortable(label: str, extra: str = "") -> str:
        return f"<th scope=\"col\"{extra}><button class=\"sort\" type=\"button\">{esc(label)}</button></th>"

    head = [sortable("job"), sortable("kind"), sortable("state"), sortable("terminal state")]
    head += [f"<th scope=\"col\" class=\"step\">{esc(step.name.replace('_', ' '))}</th>" for step in STEPS]
    head += [sortable("checkpoint"), "<th scope=\"col\">destinations</th>", sortable("preserved"),
             sortable("reclaimed"), sortable("still reclaimable"), "<th scope=\"col\">blocked by / continue with</th>"]
    counts: dict[str, int] = {}
    for view in views:
        counts[view.overall] = counts.get(view.overall, 0) + 1
    summary = ", ".join(f"{count} {state.replace('_', ' ')}" for state, count in sorted(counts.items())) or "no records"
    options = "".join(f"<option value=\"{esc(state)}\">{esc(state.replace('_', ' '))}</option>"
                      for state in ("done", "blocked", "in_progress", "not_started", "unreadable"))
    legend = "".join(f"<span class=\"st-{s}\">{s.replace('_', ' ')}</span>" for s in STEP_STATES)
    rows = "".join(run_row(view, endpoint) for view in views)
    body = (
        f"<h1>rlkeep campaign</h1><p>{len(views)} records: {esc(summary)}.</p>"
        f"<p class=\"legend\">Step states: {legend} (hover a cell for its reason).</p>"
        "<div id=\"controls\" hidden><label for=\"state-filter\">Show runs in state </label>"
        f"<select id=\"state-filter\"><option value=\"\">any</option>{options}</select> "
        "(click a column heading to sort)</div>"
        "<table id=\"runs\"><caption>One row per record in records/: each step of the pipeline, the selected "
        "checkpoint, the destinations, the storage, and what continues a run that is not done</caption>"
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>{rows}</tbody></table>"
    )
    return page("rlkeep campaign", body, generated_at=generated_at, revision=revision, script=SCRIPT)


# --------------------------------------------------------------------------- run page


def attempt_timeline(view: RunView) -> list[dict[str, Any]]:
    """Each attempt of the chain with its state and what rlkeep knows of it: stopped (retries.json),
    dead (logged no metrics: metrics/attempts.json, else the logs manifest), gone, unrecorded."""
    chain = view.files.get("chain") or {}
    retries = view.files.get("retries") or {}
    stopped = {entry.get("id"): entry for entry in retries.get("stopped") or [] if isinstance(entry, dict)}
    dead: dict[str, str] = {}
    for entry in view.status.get("attempts_without_metrics") or []:
        if isinstance(entry, dict) and entry.get("attempt"):
            dead[str(entry["attempt"])] = str(entry.get("reason") or "no metrics")
    rows = []
    for index, attempt in enumerate(chain.get("attempts") or [], start=1):
        job_id = str(attempt.get("id"))
        slug = str(attempt.get("slug") or "")
        notes = []
        if job_id in stopped:
            notes.append(f"pending retry stopped by rlkeep (now {stopped[job_id].get('state_after')})")
        why_dead = dead.get(job_id) or dead.get(slug)
        if why_dead:
            notes.append(f"dead: logged no metrics ({why_dead})")
        if attempt.get("state") == "gone":
            notes.append("gone: the scheduler no longer knows it"
                         + (f"; store log {attempt['store_log']}" if attempt.get("store_log") else ""))
        if attempt.get("error"):
            notes.append(f"error: {attempt['error']}")
        marks = [mark for mark, on in (("stopped", job_id in stopped), ("dead", bool(why_dead)),
                                       ("gone", attempt.get("state") == "gone")) if on]
        rows.append({"n": index, "id": job_id, "state": attempt.get("state"), "exit_code": attempt.get("exit_code"),
                     "notes": notes, "recorded": True, "marks": marks,
                     **{key: attempt.get(key) for key in ("submitted_ms", "started_ms", "finished_ms")}})
    for attempt in chain.get("unrecorded") or []:
        rows.append({"n": None, "id": attempt.get("id"), "state": attempt.get("state"), "exit_code": None,
                     "notes": ["unrecorded: the owner's attempt of this run that the record does not name"
                               + ("; may still write checkpoints" if attempt.get("blocks_checkpoint_reads") else "")],
                     "recorded": False, "marks": ["unrecorded"]})
    if not rows:
        for index, job_id in enumerate(view.status.get("chain") or [], start=1):
            rows.append({"n": index, "id": job_id, "state": "not captured yet", "exit_code": None,
                         "notes": ["chain.json not captured"], "recorded": True})
    return rows


def _table(caption: str, headers: list[str], rows: list[list[str]], *, first_is_header: bool = True) -> str:
    head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [f"<th scope=\"row\">{row[0]}</th>" if first_is_header else f"<td>{row[0]}</td>"]
        cells += [f"<td>{cell}</td>" for cell in row[1:]]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f"<table><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def archive_summary(text: str | None) -> dict[str, Any] | None:
    """The MANIFEST's summary line and how many artifacts are kept and skipped."""
    if not text:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    kept = sum(1 for line in lines[1:] if line.split()[:1] == ["kept"] or "\tkept" in line or " kept " in line)
    skipped = sum(1 for line in lines[1:] if line.split()[:1] == ["skipped"] or "\tskipped" in line or " skipped " in line)
    return {"summary": lines[0] if lines else "", "entries": len(lines) - 1, "kept": kept, "skipped": skipped}


FIGURE_ALT = {
    "reward.png": "the run's metric plot (reward per step with the checkpoint candidates and the selected one)",
    "vllm.png": "vLLM throughput (tokens/s, summed over engines) and running/waiting requests per second with a "
                "stat report, or a note that the logs carry none",
}


def figure_html(job_dir: Path, relative: str) -> str:
    path = job_dir / relative
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = FIGURE_ALT.get(path.name, "a metric plot of the run")
    alt = f"{relative}: {alt}"
    return (f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{esc(alt)}\">"
            f"<figcaption>{esc(relative)}</figcaption></figure>")


def cached_pngs(cache_dir: Path | None, job: str, inputs: Any,
                make: Callable[[], list[tuple[str, str, bytes]]]) -> list[tuple[str, str, str]]:
    """[(title, alt, base64 PNG)] from make(), cached under cache_dir by a digest of inputs (what the
    figures show), so a rebuild after every invocation redraws only changed runs."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:24]
    cached = cache_dir / f"{job}-{key}.json" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        try:
            return [tuple(item) for item in read_json(cached)]
        except (ValueError, OSError):
            pass
    made = [(title, alt, base64.b64encode(png).decode("ascii")) for title, alt, png in make()]
    if cached is not None:

        cached.parent.mkdir(parents=True, exist_ok=True)
        for old in cached.parent.glob(f"{job}-*.json"):  # this job's older plots (not job "x-y"'s)
            if re.fullmatch(re.escape(job) + r"-[0-9a-f]{24}\.json", old.name):
                old.unlink()
        write_json(cached, made)
    return made


def metric_panels(view: RunView, cache_dir: Path | None) -> list[tuple[str, str, str]]:
    """(title, alt, base64 PNG) of the run's plots (rlkeep.run_report.panels)."""

    rows = view.files.get("metric_rows") or []
    trials = view.files.get("trial_rows")
    if not rows and not trials:
        return []
    candidates = [int(c["step"]) for c in (view.files.get("candidates") or {}).get("candidates") or []
                  if isinstance(c, dict) and c.get("complete", True) and isinstance(c.get("step"), int)]
    selected = (view.files.get("selected") or {}).get("step")
    return cached_pngs(cache_dir, view.job, [rows, trials, candidates, selected, 1],
                       lambda: panels(rows, trials, candidates=candidates, selected_step=selected))


def chain_figure(view: RunView, timeline: list[dict[str, Any]], cache_dir: Path | None
                 ) -> tuple[str, str, str] | None:
    """(title, alt, base64 PNG) of the chain drawn as a timeline (rlkeep.chain_figure); the table
    below it says the same in text."""
    from rlkeep.chain_figure import timeline_panel

    if not timeline:
        return None
    made = cached_pngs(cache_dir / "chain" if cache_dir is not None else None, view.job, [timeline, 1],
                       lambda: [panel for panel in [timeline_panel(timeline)] if panel is not None])
    return made[0] if made else None


def run_html(view: RunView, job_dir: Path, *, generated_at: str, revision: str, endpoint: str | None = None,
             cache_dir: Path | None = None) -> str:
    status = view.status
    storage = storage_bytes(view)
    parts = [f"<p><a href=\"index.html\">All runs</a></p><h1>{esc(view.job)}</h1>"]
    facts = [
        ["kind", esc(status.get("kind", "rl"))],
        ["state", f"<span class=\"ov-{esc(view.overall)}\">{esc(view.overall.replace('_', ' '))}</span>"],
        ["terminal state", esc(status.get("terminal_state", "unknown"))],
        ["destinations", _links_html(destination_links(status, endpoint))],
        ["preserved / reclaimed / still reclaimable",
         " / ".join(esc(human_bytes(storage[k])) for k in ("preserved", "reclaimed", "reclaimable"))],
        ["local files", ", ".join(f"<a href=\"../{esc(quote(view.job))}/{esc(quote(rel))}\">{esc(rel)}</a>"
                                  for rel in view.files.get("local", [])) or "none yet"],
    ]
    if view.record_error:
        facts.append(["record error", esc(view.record_error)])
    command = blocked_command(status)
    if command:
        facts.append(["continue with", f"<code class=\"continue\">{esc(command)}</code>"])
    parts.append(_table("The run", ["fact", "value"], facts))

    step_rows = []
    for name, info in (status.get("steps") or {}).items():
        state = info.get("status", "pending")
        reason = (info.get("reason") or info.get("remaining") or "").strip()
        step_rows.append([esc(name), f"<span class=\"st-{esc(state if state in STEP_STATES else 'pending')}\">"
                          f"{esc(state.replace('_', ' '))}</span>", f"<span class=\"reason\">{esc(reason)}</span>"])
    parts.append("<h2>Steps</h2>" + _table("Every step, its state and its reason (or what remains)",
                                            ["step", "state", "reason"], step_rows))

    timeline = attempt_timeline(view)
    parts.append("<h2>Chain</h2>")
    drawn = chain_figure(view, timeline, cache_dir)
    if drawn:
        parts.append(f"<figure><img src=\"data:image/png;base64,{drawn[2]}\" alt=\"{esc(drawn[1])}\">"
                     f"<figcaption>{esc(drawn[0])}</figcaption></figure>")
    parts.append(_table("The chain as a timeline: each attempt in order, its scheduler state, and whether it "
                        "was stopped, dead, gone or unrecorded", ["#", "attempt", "state", "exit code", "notes"],
                        [[esc(row["n"] if row["n"] is not None else "unrecorded"), f"<code>{esc(row['id'])}</code>",
                          esc(row["state"]), esc(row["exit_code"] if row["exit_code"] is not None else ""),
                          esc("; ".join(row["notes"]))] for row in timeline]))

    parts.append("<h2>Metrics</h2>")
    plots = metric_panels(view, cache_dir)
    if plots:
        parts += [f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{esc(alt)}\">"
                  f"<figcaption>{esc(title)}</figcaption></figure>" for title, alt, data in plots]
    else:
        parts.append("<p>No metric plots yet (metric_surface has not run).</p>")
    figures = view.files.get("figures") or []
    if figures:
        parts.append("<details><summary>Plots in metrics/ (metric_surface, generation_stats)</summary>"
                     + "".join(figure_html(job_dir, rel) for rel in figures) + "</details>")

    parts += [f"<p class=\"reason\">Not read: {esc(error)}</p>" for error in view.files.get("table_errors") or []]
    parts.append(html_sections(view.files.get("metric_rows") or [], view.files.get("trial_rows")))
    parts.append(generation_html(view.files.get("generation") or {}))

    parts.append("<h2>Checkpoint</h2>")
    candidates = (view.files.get("candidates") or {}).get("candidates") or []
    selected = view.files.get("selected") or {}
    if selected:
        parts.append(f"<p>Selected step <strong>{esc(selected.get('step'))}</strong> by rule "
                     f"<code>{esc(selected.get('rule'))}</code>: {esc(selected.get('rationale'))}</p>")
    else:
        parts.append("<p>No checkpoint selected yet.</p>")
    if candidates:
        rows = []
        for candidate in candidates:
            if not isinstance(candidate, dict):
                continue
            chosen = selected and candidate.get("step") == selected.get("step")
            rows.append([esc(candidate.get("step")), "selected" if chosen else "",
                         "complete" if candidate.get("complete", True) else "incomplete",
                         esc(", ".join(candidate.get("sources") or [])),
                         esc("; ".join(candidate.get("reasons") or []))])
        parts.append(_table("Checkpoint candidates: every save the store holds, which one was selected and why",
                            ["step", "selection", "save", "sources", "why"], rows))

    artifacts = status.get("artifacts") or {}
    if artifacts:
        reasons = status.get("artifact_reasons") or {}
        parts.append("<h2>Artifacts</h2>" + _table(
            f"Model artifacts ({status.get('artifacts_scope', '')})", ["artifact", "state", "reason"],
            [[esc(name), esc(state), esc(reasons.get(name, ""))] for name, state in artifacts.items()]))

    verification = status.get("verification") or {}
    verify_files = view.files.get("verify") or {}
    rows = []
    for name, state in verification.items():
        evidence = verify_files.get(name) if isinstance(verify_files.get(name), dict) else {}
        where = evidence.get("repo_id") or evidence.get("dest") or evidence.get("repo") or ""
        commit = evidence.get("commit") or ""
        rows.append([esc(name), esc(state), esc(where), f"<code>{esc(commit)}</code>" if commit else ""])
    if rows:
        parts.append("<h2>Verification</h2>" + _table("What was verified where", ["check", "state", "where", "commit"],
                                                      rows))

    summary = archive_summary(view.files.get("archive_manifest"))
    parts.append("<h2>Archive</h2>")
    if summary:
        parts.append(_table("Archive MANIFEST summary", ["field", "value"], [
            ["summary line", f"<code>{esc(summary['summary'])}</code>"], ["entries", esc(summary["entries"])],
            ["kept", esc(summary["kept"])], ["skipped", esc(summary["skipped"])]]))
    else:
        parts.append("<p>No archive MANIFEST yet.</p>")
    return page(f"rlkeep run {view.job}", "".join(parts), generated_at=generated_at, revision=revision)


# --------------------------------------------------------------------------- writer


def write_campaign(data_root: Path, records_dir: Path, *, out_dir: Path | None = None,
                   invocation: str = "snakemake --profile iris", endpoint: str | None = None) -> Path:
    """campaign/index.html and campaign/<job>.html for every record; returns the index's path."""
    data_root = Path(data_root)
    out_dir = out_dir or data_root / "campaign"
    out_dir.mkdir(parents=True, exist_ok=True)
    views = load_campaign(data_root, Path(records_dir), invocation)
    generated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    revision = rlkeep_revision()
    for view in views:
        atomic_write_bytes(out_dir / f"{view.job}.html", run_html(
            view, data_root / view.job, generated_at=generated_at, revision=revision, endpoint=endpoint,
            cache_dir=out_dir / ".plots").encode("utf-8"))
    index = out_dir / "index.html"
    atomic_write_bytes(index, index_html(views, generated_at=generated_at, revision=revision,
                                         endpoint=endpoint).encode("utf-8"))
    return index
