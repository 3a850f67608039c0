"""The summary card at the top of a run's page: what a researcher looks for first (state and what
blocks it, selected step and why, the rule as the record writes it, rewards, base model, sizes,
dates, destinations, what remains and the command that continues it), from the run's digest.
"""
from __future__ import annotations

from typing import Any

from rlkeep.campaign.digest import rule_as_written, run_digest
from rlkeep.campaign.markup import (blocked_command, duration_text, esc, human_bytes, links_html, number_text,
                                    state_badge)
from rlkeep.campaign.views import RunView, destination_links, storage_bytes


def _rewards_text(rewards: dict[str, Any]) -> str:
    if not rewards["best"]:
        return "none logged yet"
    parts = [f"best <strong>{number_text(rewards['best'][1])}</strong> at step {esc(rewards['best'][0])}",
             f"final <strong>{number_text(rewards['final'][1])}</strong> at step {esc(rewards['final'][0])}"]
    if rewards["at_selected"] is not None:
        parts.append(f"{number_text(rewards['at_selected'])} at the selected step")
    return "; ".join(parts) + f" <span class=\"sub\">{esc(rewards['metric'])}, raw</span>"


def _selected_text(view: RunView) -> str:
    selected = view.files.get("selected") if isinstance(view.files.get("selected"), dict) else {}
    if not selected:
        return "No checkpoint selected yet."
    rule = rule_as_written(view.facts.get("text"))
    rule_html = (f"<pre aria-label=\"the rule as the record writes it\">{esc(rule)}</pre>" if rule
                 else "<span class=\"sub\">the record names no rule: the default applies</span>")
    return (f"Selected step <strong>{esc(selected.get('step'))}</strong>: {esc(selected.get('rationale'))}"
            f"{rule_html}")


def _dates_text(dates: dict[str, Any]) -> str:
    parts = []
    if dates.get("ran"):
        start, end = dates["ran"]
        parts.append(f"ran {esc(start)} \u2192 {esc(end or 'still running')}")
        if dates.get("duration_s") is not None:
            parts.append(f"duration {duration_text(dates['duration_s'])}")
    else:
        parts.append("the scheduler reported no run times")
    if dates.get("captured"):
        parts.append(f"chain captured {esc(dates['captured'])}")
    if dates.get("done"):
        parts.append(f"preserved (DONE) {esc(dates['done'])}")
    return "; ".join(parts)


def _remaining_text(view: RunView, digest: dict[str, Any]) -> str:
    remaining = [entry for entry in view.status.get("remaining_work") or [] if isinstance(entry, dict)]
    if view.record_error:
        return f"<span class=\"reason\">record error: {esc(view.record_error)}</span>"
    if not remaining:
        return "nothing"
    blocked = "".join(f"<li><strong>{esc(name.replace('_', ' '))}</strong> blocked: "
                      f"<span class=\"reason\">{esc(reason)}</span></li>" for name, _, reason in digest["blocked"])
    pending = [entry["step"].replace("_", " ") for entry in remaining if entry.get("status") == "pending"]
    waiting = f"<li>{len(pending)} pending: {esc(', '.join(pending))}</li>" if pending else ""
    command = blocked_command(view.status)
    return (f"<ul>{blocked}{waiting}</ul>"
            + (f"continue with <code class=\"continue\">{esc(command)}</code>" if command else ""))


def summary_card(view: RunView, endpoint: str | None = None) -> str:
    digest = run_digest(view)
    storage = storage_bytes(view)
    size = (f"model {esc(human_bytes(digest['model_bytes']))}" if digest["model_bytes"] is not None
            else "model not exported yet")
    size += (f"; {esc(human_bytes(storage['preserved']))} preserved, {esc(human_bytes(storage['reclaimable']))} "
             f"still reclaimable, {esc(human_bytes(storage['reclaimed']))} reclaimed")
    facts = [
        ("state", state_badge(digest["overall"]) + f" <span class=\"sub\">{esc(digest['kind'])} run of "
                                                  f"{esc(digest['user'])}</span>"),
        ("selected step", _selected_text(view)),
        ("reward", _rewards_text(digest["rewards"])),
        ("base model", esc(digest["base_model"] or "unknown")),
        ("size", size),
        ("dates", _dates_text(digest["dates"])),
        ("destinations", links_html(destination_links(view.status, endpoint, view.files.get("verify")))),
        ("what remains", _remaining_text(view, digest)),
    ]
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return f"<section class=\"card\" id=\"summary\" aria-labelledby=\"summary-h\"><h2 id=\"summary-h\">Summary</h2><dl>{rows}</dl></section>"
