"""The campaign's index page, `campaign/index.html`, as a dashboard: a banner naming the runs that
need an operator, the reward of every run overlaid and the selected checkpoints across runs, then one
compact row per record (state, a strip of step cells, selected step, rewards, base model, dates,
destinations, storage, the command that continues it), filtered by state, kind and user and sorted
by a small inline script. Built from each run's row and digest (`index_entry`), so a refresh reads
only the runs that changed.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from rlkeep.campaign.digest import run_digest, run_state
from rlkeep.campaign.markup import (SCRIPT, STATE_GLYPHS, STEP_GLYPHS, STEP_STATES, blocked_command, duration_text, esc,
                                    human_bytes, number_text, page, state_badge, step_strip)
from rlkeep.campaign.plots import overlay_svg, run_colour
from rlkeep.campaign.views import RunView, destination_links, storage_bytes
from rlkeep.pipeline import STEPS
from rlkeep.readable import plural

STATES = ("done", "blocked", "in_progress", "not_started", "refused", "unreadable")
NEEDS_OPERATOR = frozenset({"blocked", "refused", "unreadable"})
# (heading, width, sortable): the widths add up to 100% so the table fits 1,400 px without scrolling
COLUMNS = (("run", "10%", True), ("state", "8.5%", True), ("steps", "19.5%", False), ("selected", "7%", True),
           ("reward best / final", "8%", True), ("base model", "8%", True), ("dates", "9%", True),
           ("destinations", "9%", False), ("storage", "8%", True), ("continue with", "13%", False))
BANNER_SHOWN = 8  # runs named in the banner before the rest are folded away


def _day(iso: str | None) -> str:
    return esc(iso[:10]) if iso else "?"


def dates_cell(dates: dict[str, Any]) -> str:
    if dates.get("ran"):
        start, end = dates["ran"]
        text = f"ran {_day(start)} \u2192 {_day(end)}" + (f"<span class=\"sub\">{duration_text(dates['duration_s'])}</span>"
                                                         if dates.get("duration_s") is not None else "")
        return f"<td data-sort=\"{esc(start)}\">{text}</td>"
    kept = dates.get("done") or dates.get("captured")
    if not kept:
        return "<td data-sort=\"\">not yet</td>"
    label = "preserved" if dates.get("done") else "captured"
    return (f"<td data-sort=\"{esc(kept)}\">{label} {_day(kept)}"
            "<span class=\"sub\">run times not reported</span></td>")


def destinations_cell(status: dict[str, Any], endpoint: str | None, verify: dict[str, Any] | None = None) -> str:
    parts = []
    for label, text, href in destination_links(status, endpoint, verify):
        if href:
            parts.append(f"<a href=\"{esc(href)}\" title=\"{esc(text)}\">{esc(label)}</a>")
        else:
            parts.append(f"<span title=\"{esc(text)}\">{esc(label)}</span>")
    return "<td>" + (" \u00b7 ".join(parts) or "none") + "</td>"


def run_row(view: RunView, endpoint: str | None = None, digest: dict[str, Any] | None = None) -> str:
    """The run's row: every cell from the digest and the view, the state and the strip from run_state."""
    digest = digest or run_digest(view)
    status = view.status
    overall, cells = run_state(status, view.started, view.record_error, view.record_refused)
    selected, rewards = digest["selected"] or {}, digest["rewards"]
    storage = storage_bytes(view)
    why = "".join(f"<span class=\"why\">{esc(name.replace('_', ' '))}: {esc(short)}</span>"
                  for name, short, _ in digest["blocked"])
    if selected.get("step") is not None:
        value = (f" \u00b7 {number_text(rewards['at_selected'])}" if rewards["at_selected"] is not None else "")
        selected_cell = (f"<td data-sort=\"{esc(selected['step'])}\">step {esc(selected['step'])}"
                         f"<span class=\"sub\">{esc(selected.get('rule') or '')}{value}</span></td>")
    else:
        selected_cell = "<td data-sort=\"-1\">none yet</td>"
    if rewards["best"]:
        reward_cell = (f"<td data-sort=\"{rewards['best'][1]}\">{number_text(rewards['best'][1])} "
                       f"<span class=\"sub\">at {esc(rewards['best'][0])}; final {number_text(rewards['final'][1])}</span></td>")
    else:
        reward_cell = "<td data-sort=\"-1e308\">none logged</td>"
    reclaimable = storage["reclaimable"]
    command = blocked_command(status)
    next_cell = (f"<code>{esc(command)}</code>" if command else "nothing") if not view.record_error else (
        f"record error: <span class=\"reason\">{esc(view.record_error)}</span>")
    row = [
        f"<th scope=\"row\" data-sort=\"{esc(view.job)}\"><a href=\"{esc(quote(view.job))}.html\">{esc(view.job)}</a>"
        f"<span class=\"sub\">{esc(digest['kind'])} \u00b7 {esc(digest['user'])}</span></th>",
        f"<td data-sort=\"{esc(overall)}\">{state_badge(overall)}</td>",
        f"<td>{step_strip(view.job, cells)}{why}</td>",
        selected_cell,
        reward_cell,
        f"<td data-sort=\"{esc(digest['base_model'] or '')}\">{esc(digest['base_model'] or 'unknown')}</td>",
        dates_cell(digest["dates"]),
        destinations_cell(status, endpoint, view.files.get("verify")),
        f"<td data-sort=\"{-1 if reclaimable is None else reclaimable}\">{esc(human_bytes(storage['preserved']))} "
        f"kept<span class=\"sub\">{esc(human_bytes(reclaimable))} reclaimable"
        + (f"; {esc(human_bytes(storage['reclaimed']))} reclaimed" if storage["reclaimed"] else "") + "</span></td>",
        f"<td>{next_cell}</td>",
    ]
    return (f"<tr data-job=\"{esc(view.job)}\" data-state=\"{esc(overall)}\" data-kind=\"{esc(digest['kind'])}\" "
            f"data-user=\"{esc(digest['user'])}\">{''.join(row)}</tr>")


def index_entry(view: RunView, endpoint: str | None = None) -> dict[str, Any]:
    """What the index keeps of one run: its state, its row and its digest."""
    digest = run_digest(view)
    return {"overall": digest["overall"], "row": run_row(view, endpoint, digest), "digest": digest}


def index_html(views: list[RunView], *, generated_at: str, revision: str, endpoint: str | None = None) -> str:
    return index_from_entries([index_entry(view, endpoint) for view in views],
                              generated_at=generated_at, revision=revision)


def banner_html(digests: list[dict[str, Any]]) -> str:
    """The runs that need an operator (blocked, or a record that does not load) and why."""
    waiting = [d for d in digests if d["overall"] in NEEDS_OPERATOR]
    if not waiting:
        return "<section class=\"calm\" aria-label=\"operator\">No run needs an operator.</section>"

    def item(digest: dict[str, Any]) -> str:
        # a record's error in full (its expected value is the remedy); a step's first line (its page has the rest)
        reasons = "; ".join(f"{name.replace('_', ' ')}: {full if name == 'record' else short}"
                            for name, short, full in digest["blocked"])
        return (f"<li data-job=\"{esc(digest['job'])}\"><a href=\"{esc(quote(digest['job']))}.html\">"
                f"{esc(digest['job'])}</a> \u2014 <span class=\"wrap\">{esc(reasons)}</span></li>")

    items = [item(d) for d in waiting]
    rest = items[BANNER_SHOWN:]
    folded = (f"<details><summary>the other {len(rest)}</summary><ul>{''.join(rest)}</ul></details>"
              if rest else "")
    runs = "run needs" if len(waiting) == 1 else "runs need"
    return (f"<section class=\"banner\" id=\"banner\" aria-labelledby=\"banner-h\"><h2 id=\"banner-h\">"
            f"{STATE_GLYPHS['blocked']} {len(waiting)} {runs} an operator</h2>"
            f"<ul>{''.join(items[:BANNER_SHOWN])}</ul>{folded}</section>")


def checkpoints_html(digests: list[dict[str, Any]]) -> str:
    """The selected checkpoint of every run that has one (checkpoint/selected.json), beside its rewards."""
    rows = []
    for index, digest in enumerate(digests):
        selected, rewards = digest["selected"], digest["rewards"]
        if not selected:
            continue
        swatch = f"<span aria-hidden=\"true\" style=\"color:{run_colour(index)}\">\u25c6</span> "
        rows.append(
            f"<tr data-job=\"{esc(digest['job'])}\"><th scope=\"row\">{swatch}<a href=\"{esc(quote(digest['job']))}.html\">"
            f"{esc(digest['job'])}</a></th><td>{esc(digest['kind'])}</td><td class=\"step\">{esc(selected['step'])}</td>"
            f"<td>{esc(selected.get('rule') or '')}</td><td>{number_text(rewards['at_selected'])}</td>"
            f"<td>{number_text(rewards['best'][1]) if rewards['best'] else ''}</td></tr>")
    head = "".join(f"<th scope=\"col\">{h}</th>" for h in
                   ("run", "kind", "selected step", "rule", "reward there", "best reward"))
    return (f"<p>{plural(len(rows), 'run has', 'runs have')} a selected step (checkpoint/selected.json); the diamond is its mark "
            "in the plot.</p><div class=\"scroll\" tabindex=\"0\" role=\"region\" aria-label=\"selected checkpoints, "
            f"scrollable\"><table id=\"checkpoints\"><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody>"
            "</table></div>")


def _controls(digests: list[dict[str, Any]]) -> str:
    def select(name: str, values: list[str]) -> str:
        options = "".join(f"<option value=\"{esc(v)}\">{esc(v.replace('_', ' '))}</option>" for v in values)
        return (f"<label>{name} <select data-filter=\"{name}\" id=\"{name}-filter\"><option value=\"\">any</option>"
                f"{options}</select></label>")

    kinds = sorted({d["kind"] for d in digests})
    users = sorted({d["user"] for d in digests})
    return (f"<div id=\"controls\" hidden>{select('state', list(STATES))}{select('kind', kinds)}{select('user', users)}"
            "<span id=\"shown\" aria-live=\"polite\"></span><span>click a column heading to sort</span></div>")


def index_from_entries(entries: list[dict[str, Any]], *, generated_at: str, revision: str) -> str:
    """The index from each record's index_entry, in record order."""
    digests = [entry["digest"] for entry in entries]
    counts: dict[str, int] = {}
    for digest in digests:
        counts[digest["overall"]] = counts.get(digest["overall"], 0) + 1
    summary = ", ".join(f"{count} {state.replace('_', ' ')}" for state, count in sorted(counts.items())) or "no records"
    head = "".join(f"<th scope=\"col\" style=\"width:{width}\">"
                   + (f"<button class=\"sort\" type=\"button\">{esc(label)}</button>" if sortable else esc(label))
                   + "</th>" for label, width, sortable in COLUMNS)
    order = " \u00b7 ".join(f"{n} {step.name.replace('_', ' ')}" for n, step in enumerate(STEPS, start=1))
    legend = "".join(f"<span class=\"st-{s}\">{STEP_GLYPHS[s]} {s.replace('_', ' ')}</span>" for s in STEP_STATES)
    body = (
        f"<h1>rlkeep campaign</h1><p>{plural(len(entries), 'record')}: {esc(summary)}.</p>"
        f"{banner_html(digests)}"
        "<div class=\"top\"><section aria-labelledby=\"overlay-h\"><h2 id=\"overlay-h\">Reward across runs</h2>"
        f"{overlay_svg(digests)}</section><section aria-labelledby=\"ckpt-h\"><h2 id=\"ckpt-h\">Selected "
        f"checkpoints</h2>{checkpoints_html(digests)}</section></div>"
        f"<h2>Runs</h2>{_controls(digests)}"
        f"<p class=\"legend\">Steps, left to right: {esc(order)}. {legend} (focus or click a blocked cell for its "
        "reason).</p>"
        f"<table id=\"runs\" data-steps=\"{esc('|'.join(step.name.replace('_', ' ') for step in STEPS))}\"><thead><tr>{head}</tr></thead><tbody>{''.join(e['row'] for e in entries)}</tbody></table>"
    )
    return page("rlkeep campaign", body, generated_at=generated_at, revision=revision, script=SCRIPT)
