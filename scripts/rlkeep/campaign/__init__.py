"""The campaign view: `campaign/index.html` (one row per record) and `campaign/<job>.html`.

Pure builders (job folders -> data -> HTML strings) and one thin writer. Everything is read from
local files (the records and the job folders, through rlkeep.report.build_status), nothing from the
network, so the pages are cheap to rebuild after every invocation. The pages are self-contained:
inline CSS, an optional inline script (sorting and filtering; the tables read the same without it),
the run figures as PNG data URIs and the campaign's overlay plot as inline SVG.

The parts, one job each: `views` (what is read for each record, no HTML), `digest` (what the index
compares across runs, and the one function that gives a run's state and step cells), `markup` (the
HTML both pages share; every value goes through `esc`), `plots` (the overlay SVG), `index_page`,
`summary` (the run page's card), `chain_figure` (the chain's SVG), `run_page`, `writer` (the one
writer of the pages and STATUS.json). The names below
are the package's public surface (`from rlkeep.campaign import ...`).
"""
from rlkeep.campaign.digest import rule_as_written, run_digest, run_state
from rlkeep.campaign.index_page import index_entry, index_from_entries, index_html, run_row
from rlkeep.campaign.markup import (
    CSS,
    SCRIPT,
    STEP_STATES,
    blocked_command,
    esc,
    folded,
    human_bytes,
    links_html,
    page,
    state_badge,
    step_strip,
    table,
)
from rlkeep.campaign.plots import overlay_svg
from rlkeep.campaign.run_page import (
    FIGURE_ALT,
    archive_summary,
    attempt_timeline,
    cached_pngs,
    chain_figure,
    figure_html,
    generation_html,
    metric_panels,
    run_html,
)
from rlkeep.campaign.summary import summary_card
from rlkeep.campaign.views import (
    DEFAULT_HUB,
    RunView,
    destination_links,
    hub_url,
    load_campaign,
    load_run,
    overall_state,
    storage_bytes,
)
from rlkeep.campaign.writer import render_index, render_run, write_views

__all__ = [
    "CSS", "DEFAULT_HUB", "FIGURE_ALT", "SCRIPT", "STEP_STATES", "RunView", "archive_summary", "attempt_timeline",
    "blocked_command", "cached_pngs", "chain_figure", "destination_links", "esc", "figure_html", "folded",
    "generation_html", "hub_url", "human_bytes", "index_entry", "index_from_entries", "index_html", "links_html",
    "load_campaign", "load_run", "metric_panels", "overall_state", "overlay_svg", "page", "rule_as_written",
    "run_digest", "run_html", "run_row", "run_state", "state_badge", "step_strip", "storage_bytes", "summary_card",
    "render_index", "render_run", "table", "write_views",
]
