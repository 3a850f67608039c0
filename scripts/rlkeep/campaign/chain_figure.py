"""The chain as a drawn timeline for the campaign's run page: one lane per attempt (chain order, then
the unrecorded ones), coloured by scheduler state, marked when rlkeep stopped it, when it logged no
metrics (dead), when the scheduler no longer knows it (gone) and when the record does not name it
(unrecorded, pale and dashed).

Times come only from the scheduler (chain.json's submitted/started/finished_ms). Iris prints none,
so an Iris chain is drawn in chain order on an axis that says so, never on invented times.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from rlkeep.campaign.markup import esc

STATE_COLOURS = {
    "succeeded": "#2e7d32", "completed": "#2e7d32", "failed": "#c62828", "worker_failed": "#c62828",
    "killed": "#6d6d6d", "cancelled": "#6d6d6d", "stopped": "#6d6d6d", "unschedulable": "#8e6c00",
    "pending": "#f2b705", "building": "#f2b705", "running": "#1565c0", "gone": "#7b3294",
}
UNKNOWN_COLOUR = "#9e9e9e"


def _seconds(value: Any) -> float | None:
    return float(value) / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def lane_label(row: Mapping[str, Any]) -> str:
    """`state (marks)`: marks are stopped, dead, gone, unrecorded (campaign.attempt_timeline)."""
    marks = row.get("marks") or []
    return f"{row.get('state') or 'unknown'}" + (f" ({', '.join(marks)})" if marks else "")


def describe(rows: Sequence[Mapping[str, Any]], timed: bool) -> str:
    """Alt text: every lane in words, and which axis the drawing uses."""
    parts = [f"{'#' + str(row['n']) if row.get('n') is not None else 'unrecorded'} {row.get('id')}: "
             f"{lane_label(row)}" for row in rows]
    axis = "on the scheduler's times" if timed else "in chain order (the scheduler reported no times)"
    return f"The chain of {len(rows)} attempts drawn {axis}: " + "; ".join(parts)


LANE_PX, LABEL_PX, PLOT_PX, TEXT_PX = 24, 190, 560, 300  # one lane's height; the label, bar and text columns


def timeline_svg(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(alt text, inline SVG) of the chain; None without attempts. rows as campaign.attempt_timeline
    gives them, with submitted_ms/started_ms/finished_ms where the scheduler reported them. Drawn as
    markup, not a plot: a run page is rebuilt after every invocation, and a plotting library's import
    would cost more than the page."""
    if not rows:
        return None
    starts = [_seconds(r.get("started_ms")) or _seconds(r.get("submitted_ms")) for r in rows]
    ends = [_seconds(r.get("finished_ms")) for r in rows]
    known = [t for t in starts + ends if t is not None]
    timed = bool(known)
    alt = describe(rows, timed)
    if timed:
        low, high = min(known), max(known)
        span = (high - low) or 1.0

        def x(seconds: float) -> float:
            return LABEL_PX + PLOT_PX * (seconds - low) / span
    parts = []
    for lane, row in enumerate(rows):
        top = 8 + lane * LANE_PX
        colour = STATE_COLOURS.get(str(row.get("state")), UNKNOWN_COLOUR)
        # unrecorded (the record does not name it): pale and dashed, where the plot hatched it
        look = ' fill-opacity="0.35" stroke-dasharray="4 2"' if not row.get("recorded", True) else ""
        end_text = ""
        if not timed:
            left, width = LABEL_PX + lane * (PLOT_PX / len(rows)), PLOT_PX / len(rows) * 0.9
        elif starts[lane] is None:  # no time for this attempt: a tick at the left edge says so
            left, width, end_text = LABEL_PX, 2.0, "no times reported"
        else:
            end = ends[lane] if ends[lane] is not None else high
            left, width = x(starts[lane]), max(x(end) - x(starts[lane]), 3.0)
            end_text = "" if ends[lane] is not None else "unfinished"
        name = f"#{row['n']} {row.get('id')}" if row.get("n") is not None else str(row.get("id"))
        text = lane_label(row) + (f", {end_text}" if end_text else "")
        parts.append(
            f'<text x="{LABEL_PX - 6}" y="{top + 15}" text-anchor="end">{esc(name)}</text>'
            f'<rect x="{left:.1f}" y="{top + 3}" width="{width:.1f}" height="16" fill="{colour}" stroke="#222" '
            f'stroke-width="0.6"{look}/>'
            f'<text x="{left + width + 4:.1f}" y="{top + 15}">{esc(text)}</text>')
    bottom = 8 + len(rows) * LANE_PX
    if timed:
        axis = (f'<text x="{LABEL_PX}" y="{bottom + 16}">{_utc(low)}</text>'
                f'<text x="{LABEL_PX + PLOT_PX}" y="{bottom + 16}" text-anchor="end">{_utc(high)}</text>'
                f'<text x="{LABEL_PX + PLOT_PX / 2}" y="{bottom + 32}" text-anchor="middle">UTC (scheduler times)</text>')
    else:
        axis = (f'<text x="{LABEL_PX + PLOT_PX / 2}" y="{bottom + 16}" text-anchor="middle">chain order: the '
                'scheduler reported no submitted/started/finished times</text>')
    width_px, height_px = LABEL_PX + PLOT_PX + TEXT_PX, bottom + 40
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width_px} {height_px}" width="{width_px}" '
           f'style="max-width:100%;height:auto" role="img" aria-label="{esc(alt)}" font-size="11" '
           'font-family="sans-serif">'
           f'<title>{esc(alt)}</title>'
           f'<line x1="{LABEL_PX}" y1="{bottom}" x2="{LABEL_PX + PLOT_PX}" y2="{bottom}" stroke="#888"/>'
           + "".join(parts) + axis + "</svg>")
    return alt, svg


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%m-%d %H:%M")
