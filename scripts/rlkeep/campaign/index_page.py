"""The campaign's index page, `campaign/index.html`: one row per record, each step's state, the
selected checkpoint, the destinations, the storage, and what continues a run that is not done.
"""
from __future__ import annotations

from urllib.parse import quote

from rlkeep.campaign.markup import SCRIPT, STEP_STATES, blocked_command, esc, human_bytes, links_html, page, step_cell
from rlkeep.campaign.views import RunView, destination_links, storage_bytes
from rlkeep.pipeline import STEPS


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
    cells.append(f"<td class=\"dest\">{links_html(destination_links(status, endpoint))}</td>")
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
    return index_from_rows([(view.overall, run_row(view, endpoint)) for view in views],
                           generated_at=generated_at, revision=revision)


def index_from_rows(rows: list[tuple[str, str]], *, generated_at: str, revision: str) -> str:
    """The index from each record's (overall state, run_row HTML), in record order: the writer keeps
    the rows of runs that did not change, so a refresh reads only the runs that did."""

    def sortable(label: str, extra: str = "") -> str:
        return f"<th scope=\"col\"{extra}><button class=\"sort\" type=\"button\">{esc(label)}</button></th>"

    head = [sortable("job"), sortable("kind"), sortable("state"), sortable("terminal state")]
    head += [f"<th scope=\"col\" class=\"step\">{esc(step.name.replace('_', ' '))}</th>" for step in STEPS]
    head += [sortable("checkpoint"), "<th scope=\"col\">destinations</th>", sortable("preserved"),
             sortable("reclaimed"), sortable("still reclaimable"), "<th scope=\"col\">blocked by / continue with</th>"]
    counts: dict[str, int] = {}
    for overall, _ in rows:
        counts[overall] = counts.get(overall, 0) + 1
    summary = ", ".join(f"{count} {state.replace('_', ' ')}" for state, count in sorted(counts.items())) or "no records"
    options = "".join(f"<option value=\"{esc(state)}\">{esc(state.replace('_', ' '))}</option>"
                      for state in ("done", "blocked", "in_progress", "not_started", "unreadable"))
    legend = "".join(f"<span class=\"st-{s}\">{s.replace('_', ' ')}</span>" for s in STEP_STATES)
    body = (
        f"<h1>rlkeep campaign</h1><p>{len(rows)} records: {esc(summary)}.</p>"
        f"<p class=\"legend\">Step states: {legend} (hover a cell for its reason).</p>"
        "<div id=\"controls\" hidden><label for=\"state-filter\">Show runs in state </label>"
        f"<select id=\"state-filter\"><option value=\"\">any</option>{options}</select> "
        "(click a column heading to sort)</div>"
        "<table id=\"runs\"><caption>One row per record in records/: each step of the pipeline, the selected "
        "checkpoint, the destinations, the storage, and what continues a run that is not done</caption>"
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(row for _, row in rows)}</tbody></table>"
    )
    return page("rlkeep campaign", body, generated_at=generated_at, revision=revision, script=SCRIPT)
