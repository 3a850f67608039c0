"""A run's page, `campaign/<job>.html`, most important first: the summary card (rlkeep.campaign.summary),
the steps, the metric plots and analysis, the checkpoint candidates, the chain (drawn and as a table),
generation statistics, artifacts, verification, archive and the run's files; long tables folded.
Plots are cached under campaign/.plots by a digest of what they show, so a rebuild after every
invocation redraws only the runs that changed.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlkeep.campaign.digest import run_state
from rlkeep.campaign.markup import STEP_STATES, esc, folded, page, state_badge, step_strip, table
from rlkeep.campaign.summary import summary_card
from rlkeep.campaign.views import RunView
from rlkeep.campaign.chain_figure import timeline_svg
from rlkeep.jsonio import read_json, write_json
from rlkeep.run_report import Section, batch_error_sections, panels, sections, vllm_sections


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
    return f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{esc(alt)}\"></figure>"


def cached_pngs(cache_dir: Path | None, job: str, inputs: Any,
                make: Callable[[], list[tuple[str, str, bytes]]]) -> list[tuple[str, str, str]]:
    """[(title, alt, base64 PNG)] from make(), cached under cache_dir by a digest of inputs (what the
    figures show), so a rebuild after every invocation redraws only changed runs."""
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


def chain_figure(timeline: list[dict[str, Any]]) -> str:
    """The chain drawn as a timeline (rlkeep.chain_figure, inline SVG), or nothing without attempts;
    the table below it says the same in text."""
    drawn = timeline_svg(timeline)
    return f"<figure>{drawn[1]}</figure>" if drawn else ""


def generation_html(tables: dict[str, Any]) -> str:
    """The vLLM utilisation and batch errors sections (rlkeep.run_report), or why they are absent."""
    vllm, errors = tables.get("vllm"), tables.get("batch_errors")
    if vllm is None and errors is None:
        return ("<h3>vLLM utilisation and batch errors</h3><p>Not available: generation_stats has not run "
                "(metrics/vllm.csv and metrics/batch_errors.csv are absent).</p>")
    columns = list(errors[0].keys()) if errors else []
    return sections_html(vllm_sections(vllm or []) + batch_error_sections(columns, errors or []))


def sections_html(parts: list[Section]) -> str:
    """rlkeep.run_report's sections: a heading, the note, the table (folded when long)."""
    out, absent = [], []
    for title, headers, rows, note in parts:
        if rows is None:
            absent.append(f"<li><strong>{esc(title)}</strong> \u2014 Not available: {esc(note)}.</li>")
            continue
        out.append(f"<h3>{esc(title)}</h3>")
        out.append(f"<p class=\"sub\">{esc(note)}</p>" if note else "")
        out.append(folded(title, len(rows), table("", headers, [[esc(c) for c in row] for row in rows])))
    return "".join(out) + (f"<ul class=\"absent\">{''.join(absent)}</ul>" if absent else "")

def files_html(view: RunView) -> str:
    """What the card leaves out: the terminal state and the run's local files."""
    status = view.status
    facts = [
        ["terminal state", esc(status.get("terminal_state", "unknown"))],
        ["local files", ", ".join(f"<a href=\"../{esc(quote(view.job))}/{esc(quote(rel))}\">{esc(rel)}</a>"
                                  for rel in view.files.get("local", [])) or "none yet"],
    ]
    return "<h2>Files</h2>" + table("", ["fact", "value"], facts)


def steps_html(view: RunView) -> str:
    overall, cells = run_state(view.status, view.started, view.record_error, view.record_refused)
    step_rows = []
    for name, state, reason in cells:
        step_rows.append([esc(name), f"<span class=\"st-{esc(state if state in STEP_STATES else 'pending')}\">"
                          f"{esc(state.replace('_', ' '))}</span>", f"<span class=\"reason\">{esc(reason)}</span>"])
    return (f"<h2>Steps</h2>{step_strip(view.job, cells)}"
            + folded("Every step, its state and its reason or what remains", len(step_rows),
                     table("", ["step", "state", "reason or what remains"], step_rows)))


def chain_html(view: RunView) -> str:
    timeline = attempt_timeline(view)
    parts = ["<h2>Chain</h2>", chain_figure(timeline)]
    parts.append("<p>Each attempt in order, its scheduler state, and whether it was stopped, dead, gone or "
                 "unrecorded.</p>")
    parts.append(folded("Attempts", len(timeline), table(
        "", ["#", "attempt", "state", "exit code", "notes"],
        [[esc(row["n"] if row["n"] is not None else "unrecorded"), f"<code>{esc(row['id'])}</code>",
          esc(row["state"]), esc(row["exit_code"] if row["exit_code"] is not None else ""),
          esc("; ".join(row["notes"]))] for row in timeline])))
    return "".join(parts)


def metrics_html(view: RunView, job_dir: Path, cache_dir: Path | None) -> str:
    """The metric plots, the figures in metrics/, the run analysis and the generation statistics."""
    parts = ["<h2>Metrics</h2>"]
    plots = metric_panels(view, cache_dir)
    if plots:
        parts += [f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{esc(alt)}\"></figure>"
                  for _, alt, data in plots]
    else:
        parts.append("<p>No metric plots yet (metric_surface has not run).</p>")
    figures = view.files.get("figures") or []
    if figures:
        parts.append("<details><summary>Plots in metrics/ (metric_surface, generation_stats)</summary>"
                     + "".join(figure_html(job_dir, rel) for rel in figures) + "</details>")

    parts += [f"<p class=\"reason\">Not read: {esc(error)}</p>" for error in view.files.get("table_errors") or []]
    parts.append(sections_html(sections(view.files.get("metric_rows") or [], view.files.get("trial_rows"))))
    parts.append(generation_html(view.files.get("generation") or {}))
    return "".join(parts)


def checkpoint_html(view: RunView) -> str:
    """Every candidate the store holds and which one was selected (the card gives the why)."""
    parts = ["<h2>Checkpoint candidates</h2>"]
    candidates = (view.files.get("candidates") or {}).get("candidates") or []
    selected = view.files.get("selected") or {}
    if not candidates:
        parts.append("<p>None listed yet.</p>")
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
        parts.append(folded("Candidates", len(rows), table(
            "", ["step", "selection", "save", "sources", "why"], rows)))
    return "".join(parts)


def published_html(view: RunView) -> str:
    """The model artifacts and what was verified where (empty before any of it exists)."""
    status = view.status
    parts = []
    artifacts = status.get("artifacts") or {}
    if artifacts:
        reasons = status.get("artifact_reasons") or {}
        parts.append("<h2>Artifacts</h2>" + folded("Model artifacts", len(artifacts), table(
            f"Scope: {status.get('artifacts_scope', '')}" if status.get("artifacts_scope") else "",
            ["artifact", "state", "reason"],
            [[esc(name), esc(state), esc(reasons.get(name, ""))] for name, state in artifacts.items()])))

    verification = status.get("verification") or {}
    verify_files = view.files.get("verify") or {}
    rows = []
    for name, state in verification.items():
        evidence = verify_files.get(name) if isinstance(verify_files.get(name), dict) else {}
        where = evidence.get("repo_id") or evidence.get("dest") or evidence.get("repo") or ""
        commit = evidence.get("commit") or ""
        rows.append([esc(name), esc(state), esc(where), f"<code>{esc(commit)}</code>" if commit else ""])
    if rows:
        parts.append("<h2>Verification</h2>" + table("", ["check", "state", "where", "commit"], rows))
    return "".join(parts)


def audit_html(view: RunView) -> str:
    """The last `rlkeep audit` of this run (STATUS.json's `audit`): when, what it found, and the
    command that repairs each finding."""
    audit = view.status.get("audit") if isinstance(view.status.get("audit"), dict) else None
    if audit is None:
        if not view.status.get("done"):
            return ""
        return (f"<h2>Last audit</h2><p>Never audited. <code>rlkeep audit {esc(view.job)}</code> checks again every "
                "destination DONE names (reads only).</p>")
    state = {"ok": "no drift", "drift": "drift found", "unchecked": "some destinations not reached"}.get(
        str(audit.get("status")), str(audit.get("status")))
    text = (f"<h2>Last audit</h2><p>{esc(audit.get('audited_at'))}: <strong>{esc(state)}</strong> "
            f"({esc(audit.get('checked'))} checks{'; archive data read in full' if audit.get('read_data') else ''}).</p>")
    rows = [[esc(f.get("destination")), esc(f.get("subject")), f"<span class=\"reason\">{esc(f.get('problem'))}</span>",
             f"<code>{esc(f.get('repair'))}</code>" if f.get("repair") else "none"]
            for f in audit.get("findings") or []]
    rows += [[esc(u.get("destination")), "", f"<span class=\"reason\">not reached: {esc(u.get('error'))}</span>", ""]
             for u in audit.get("unreached") or []]
    if rows:
        text += table("What no longer is as DONE says", ["where", "what", "problem", "repair"], rows)
    return text


def archive_html(view: RunView) -> str:
    summary = archive_summary(view.files.get("archive_manifest"))
    if not summary:
        return "<h2>Archive</h2><p>No archive MANIFEST yet.</p>"
    return "<h2>Archive</h2>" + table("The MANIFEST's summary", ["field", "value"], [
        ["summary line", f"<code>{esc(summary['summary'])}</code>"], ["entries", esc(summary["entries"])],
        ["kept", esc(summary["kept"])], ["skipped", esc(summary["skipped"])]])


def run_html(view: RunView, job_dir: Path, *, generated_at: str, revision: str, endpoint: str | None = None,
             cache_dir: Path | None = None) -> str:
    parts = [
        f"<p><a href=\"index.html\">All runs</a></p><h1>{esc(view.job)} {state_badge(view.overall)}</h1>",
        summary_card(view, endpoint),
        steps_html(view),
        metrics_html(view, job_dir, cache_dir),
        checkpoint_html(view),
        chain_html(view),
        published_html(view),
        audit_html(view),
        archive_html(view),
        files_html(view),
    ]
    return page(f"rlkeep run {view.job}", "".join(parts), generated_at=generated_at, revision=revision)
