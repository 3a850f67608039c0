"""What the campaign compares across runs, one small JSON-able dict per run (no HTML): the state and
the step cells (from one function, so a run is never `done` beside a blocked cell), the selected
checkpoint, best and final reward, the reward curve thinned for the overlay plot, base model, model
size and dates. The writer keeps each run's digest beside its index row, so the campaign plots are
redrawn from stored numbers when one run changes.
"""
from __future__ import annotations

import re
import time
from typing import Any

from rlkeep.pipeline import STEPS
from rlkeep.run_report import reward_series, smoothed

CURVE_POINTS = 60  # per run and per line: 300 runs stay well under the index's 2 MB


def run_state(status: dict[str, Any], started: bool, record_error: str | None = None, refused: bool = False
              ) -> tuple[str, list[tuple[str, str, str]]]:
    """(overall state, [(step, status, reason or what remains)] in pipeline order). `done` needs DONE
    and no blocked step; any blocked step, or drift its last audit found, makes the run `blocked`; a
    record that does not load is `refused` (valid YAML that validation refuses) or `unreadable`."""
    steps = status.get("steps") or {}
    cells = []
    for step in STEPS:
        info = steps.get(step.name) or {"status": "pending"}
        state = str(info.get("status") or "pending")
        reason = str(info.get("reason") or info.get("remaining") or "").strip()
        cells.append((step.name, state, reason))
    if record_error:
        return ("refused" if refused else "unreadable"), cells
    if any(state == "blocked" for _, state, _ in cells) or audit_drift(status):
        return "blocked", cells
    if status.get("done"):
        return "done", cells
    return ("in_progress" if started else "not_started"), cells


def audit_drift(status: dict[str, Any]) -> str | None:
    """The first finding of the run's last audit (verify/audit.json) when it found drift, else None."""
    audit = status.get("audit") if isinstance(status.get("audit"), dict) else {}
    if audit.get("status") != "drift":
        return None
    first = next(iter(audit.get("findings") or []), {})
    more = len(audit.get("findings") or []) - 1
    return (f"{audit.get('audited_at')}: {first.get('destination')} {first.get('subject')}: {first.get('problem')}"
            + (f" (and {more} more)" if more > 0 else ""))


def short_reason(reason: str, limit: int = 90) -> str:
    """The first line of a reason, cut at a word near `limit` characters."""
    line = reason.strip().splitlines()[0] if reason.strip() else ""
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def thin(xs: list[float], ys: list[float], points: int = CURVE_POINTS) -> list[list[float]]:
    """At most `points` [x, y] pairs, evenly spaced over the series, first and last kept."""
    if len(xs) <= points:
        indexes = list(range(len(xs)))
    else:
        indexes = sorted({round(i * (len(xs) - 1) / (points - 1)) for i in range(points)})
    return [[xs[i], round(ys[i], 4)] for i in indexes]


def rewards(rows: list[dict[str, Any]], selected_step: Any) -> dict[str, Any]:
    """The reward metric, best and final (step, value), the value at the selected step, and the curve."""
    metric, logged, values = reward_series(rows)
    steps = [int(step) if float(step).is_integer() else step for step in logged]
    if not steps:
        return {"metric": None, "best": None, "final": None, "at_selected": None, "raw": [], "smooth": []}
    best = max(range(len(values)), key=lambda i: values[i])
    at_selected = None
    if isinstance(selected_step, (int, float)):
        logged = [i for i, step in enumerate(steps) if step <= selected_step]
        at_selected = values[logged[-1]] if logged else None
    return {"metric": metric, "best": [steps[best], values[best]], "final": [steps[-1], values[-1]],
            "at_selected": at_selected, "raw": thin(steps, values), "smooth": thin(steps, smoothed(values))}


def _iso(seconds: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)) if seconds is not None else None


def dates(files: dict[str, Any]) -> dict[str, Any]:
    """When the run ran (the scheduler's times, where it reports them; Iris does not) and when rlkeep
    preserved it (the chain captured, DONE written)."""
    attempts = [a for a in ((files.get("chain") or {}).get("attempts") or []) if isinstance(a, dict)]
    starts = [a.get("started_ms") or a.get("submitted_ms") for a in attempts]
    ends = [a.get("finished_ms") for a in attempts]
    starts = [s for s in starts if isinstance(s, (int, float))]
    ends = [e for e in ends if isinstance(e, (int, float))]
    ran = [_iso(min(starts) / 1000), _iso(max(ends) / 1000) if ends else None] if starts else None
    captured = files.get("chain_captured")
    return {"ran": ran, "duration_s": (max(ends) - min(starts)) / 1000 if starts and ends else None,
            "captured": _iso(captured) if isinstance(captured, (int, float)) else None, "done": files.get("done_at")}


def model_bytes(files: dict[str, Any]) -> int | None:
    """The exported model's size (export.json's file list)."""
    export = files.get("export") if isinstance(files.get("export"), dict) else {}
    sizes = [f.get("size") for f in export.get("files") or [] if isinstance(f, dict)]
    sizes = [s for s in sizes if isinstance(s, int)]
    return sum(sizes) if sizes else None


def rule_as_written(record_text: str | None) -> str | None:
    """The record's `checkpoint:` block as its author wrote it (comments and order kept)."""
    if not record_text:
        return None
    lines = record_text.splitlines()
    for start, line in enumerate(lines):
        if re.match(r"checkpoint\s*:", line):
            block = [line]
            for following in lines[start + 1:]:
                if following.strip() and not following[:1].isspace() and not following.lstrip().startswith("#"):
                    break
                block.append(following)
            return "\n".join(block).rstrip()
    return None


def run_digest(view: Any) -> dict[str, Any]:
    """The run as the index compares it (view: rlkeep.campaign.views.RunView)."""
    status, files = view.status, view.files
    overall, cells = run_state(status, view.started, view.record_error, view.record_refused)
    selected = files.get("selected") if isinstance(files.get("selected"), dict) else {}
    rule = selected.get("rule") if isinstance(selected.get("rule"), dict) else {}
    blocked = [[name, short_reason(reason), reason] for name, state, reason in cells if state == "blocked"]
    if view.record_error:
        blocked.insert(0, ["record", short_reason(view.record_error), view.record_error])
    drift = audit_drift(status)
    if drift:
        blocked.append(["audit", short_reason(drift), drift])
    return {
        "job": view.job, "kind": str(status.get("kind") or "rl"), "user": view.facts.get("user") or "unknown",
        "overall": overall, "cells": [[name, state] for name, state, _ in cells], "blocked": blocked,
        "selected": {"step": selected["step"], "rule": rule.get("kind")} if selected.get("step") is not None else None,
        "rewards": rewards(files.get("metric_rows") or [], selected.get("step")),
        "base_model": view.facts.get("base_model"), "model_bytes": model_bytes(files),
        "dates": dates(files),
    }
