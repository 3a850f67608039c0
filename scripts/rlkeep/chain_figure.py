"""The chain as a drawn timeline for the campaign's run page: one lane per attempt (chain order, then
the unrecorded ones), coloured by scheduler state, marked when rlkeep stopped it, when it logged no
metrics (dead), when the scheduler no longer knows it (gone) and when the record does not name it
(unrecorded, hatched).

Times come only from the scheduler (chain.json's submitted/started/finished_ms). Iris prints none,
so an Iris chain is drawn in chain order on an axis that says so, never on invented times.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from rlkeep.run_report import render_panel

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


def timeline_panel(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str, bytes] | None:
    """(title, alt, PNG) of the chain; None without attempts. rows as campaign.attempt_timeline gives
    them, with submitted_ms/started_ms/finished_ms where the scheduler reported them."""
    if not rows:
        return None
    starts = [_seconds(r.get("started_ms")) or _seconds(r.get("submitted_ms")) for r in rows]
    ends = [_seconds(r.get("finished_ms")) for r in rows]
    known = [t for t in starts + ends if t is not None]
    timed = bool(known)
    horizon = max(known) if known else None
    span = (max(known) - min(known)) if known else 0.0

    def draw(axes) -> bool:
        import matplotlib.dates as mdates

        labels = []
        for lane, row in enumerate(rows):
            colour = STATE_COLOURS.get(str(row.get("state")), UNKNOWN_COLOUR)
            hatch = "///" if not row.get("recorded", True) else None
            if timed:
                start = starts[lane]
                if start is None:  # no time for this attempt: a marker at the left edge says so
                    axes.plot([_date(min(known))], [lane], marker="|", color=colour, markersize=14)
                    end_text = "no times reported"
                    x_text = _date(min(known))
                else:
                    end = ends[lane] if ends[lane] is not None else horizon
                    width = max(end - start, span * 0.01 or 1.0)
                    axes.barh(lane, width / 86400, left=_date(start), height=0.6, color=colour,
                              hatch=hatch, edgecolor="#222222", linewidth=0.6)
                    end_text = "" if ends[lane] is not None else "unfinished"
                    x_text = _date(start + width)
            else:
                axes.barh(lane, 0.8, left=lane, height=0.6, color=colour, hatch=hatch, edgecolor="#222222",
                          linewidth=0.6)
                end_text = ""
                x_text = lane + 0.85
            text = lane_label(row) + (f", {end_text}" if end_text else "")
            axes.text(x_text, lane, " " + text, va="center", fontsize=7)
            labels.append(f"#{row['n']} {row.get('id')}" if row.get("n") is not None else f"{row.get('id')}")
        axes.set_yticks(range(len(rows)), labels, fontsize=7)
        axes.invert_yaxis()
        if timed:
            axes.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
            axes.tick_params(axis="x", labelsize=7)
            axes.set_xlabel("UTC (scheduler times)")
        else:
            axes.set_xlim(-0.2, len(rows) + 2.5)
            axes.set_xticks([])
            axes.set_xlabel("chain order: the scheduler reported no submitted/started/finished times")
        return True

    height = 1.0 + 0.45 * len(rows)
    return render_panel(draw, "the chain: attempts, states, stopped, dead, gone and unrecorded",
                        describe(rows, timed), height=height)


def _date(seconds: float) -> float:
    """Matplotlib's date number (days) of a UTC epoch time."""
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(seconds, tz=timezone.utc)))
