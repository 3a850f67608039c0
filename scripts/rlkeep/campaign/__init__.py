"""The campaign view: `campaign/index.html` (one row per record) and `campaign/<job>.html`.

Pure builders (job folders -> data -> HTML strings) and one thin writer. Everything is read from
local files (the records and the job folders, through rlkeep.report.build_status), nothing from the
network, so the pages are cheap to rebuild after every invocation. The pages are self-contained:
inline CSS, an optional inline script (sorting and filtering; the tables read the same without it),
figures as PNG data URIs.

The parts, one job each: `views` (what is read for each record, no HTML), `markup` (the HTML both
pages share; every value goes through `esc`), `index_page`, `run_page`, `writer`. The names below
are the package's public surface (`from rlkeep.campaign import ...`).
"""
from rlkeep.campaign.index_page import index_html, run_row
from rlkeep.campaign.markup import (
    CSS,
    SCRIPT,
    STEP_STATES,
    blocked_command,
    esc,
    human_bytes,
    links_html,
    page,
    step_cell,
    table,
)
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
from rlkeep.campaign.writer import write_campaign

__all__ = [
    "CSS", "DEFAULT_HUB", "FIGURE_ALT", "SCRIPT", "STEP_STATES", "RunView", "archive_summary", "attempt_timeline",
    "blocked_command", "cached_pngs", "chain_figure", "destination_links", "esc", "figure_html", "generation_html",
    "hub_url", "human_bytes", "index_html", "links_html", "load_campaign", "load_run", "metric_panels",
    "overall_state", "page", "run_html", "run_row", "step_cell", "storage_bytes", "table", "write_campaign",
]
