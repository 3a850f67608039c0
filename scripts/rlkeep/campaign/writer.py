"""Write the campaign pages: `campaign/index.html` and `campaign/<job>.html` for every record."""
from __future__ import annotations

import time
from pathlib import Path

from rlkeep.campaign.index_page import index_html
from rlkeep.campaign.run_page import run_html
from rlkeep.campaign.views import load_campaign
from rlkeep.jsonio import atomic_write_bytes
from rlkeep.report import rlkeep_revision


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
