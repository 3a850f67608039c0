"""Write the campaign pages: `campaign/index.html` and `campaign/<job>.html` for every record.

The pages are rebuilt after every invocation, and a run page costs tens of milliseconds and a
few hundred KB to build and write, so a campaign of 1,000 runs would spend half a minute rewriting
pages of runs nothing touched. `campaign/.pages.json` remembers, per run, a fingerprint of what its
page is made from (the record file and the job folder's listing, rlkeep.folderstate) and the run's
index row and digest (what the campaign plots draw); a run whose fingerprint is unchanged keeps its
page, row and digest. Anything
that changes every page (rlkeep's code, the Hub endpoint, the invocation) rebuilds them all.
"""
from __future__ import annotations

import glob
import os
import re
import time
from pathlib import Path
from typing import Any

from rlkeep.campaign.index_page import index_entry, index_from_entries
from rlkeep.campaign.run_page import run_html
from rlkeep.campaign.views import load_run
from rlkeep.folderstate import code_digest, job_fingerprint, refresh_lock
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.report import rlkeep_revision

PAGES_STATE = ".pages.json"
PAGES_LOCK = ".pages.lock"
KEPT_PAGES = ".pages"  # hard links to the pages, by fingerprint (_keep_page)
# raise when the pages change in a way the fingerprint cannot see (2: a run's record error kept; 3: digests)
PAGES_FORMAT = 3
REFUSED = "refused.json"  # the records that do not load, for scripts (README, "A job record")


def _previous_runs(state_path: Path, settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The runs remembered by the last refresh made with the same settings; {} when there are none."""
    try:
        state = read_json(state_path)
    except (FileNotFoundError, ValueError, OSError):
        return {}
    if not isinstance(state, dict) or state.get("settings") != settings or not isinstance(state.get("runs"), dict):
        return {}
    return {job: run for job, run in state["runs"].items()
            if isinstance(run, dict) and isinstance(run.get("digest"), dict)
            and all(isinstance(run.get(key), str) for key in ("fingerprint", "overall", "row"))}


def _kept_page(out_dir: Path, job: str, fingerprint: str) -> Path:
    return out_dir / KEPT_PAGES / f"{job}.{fingerprint[:24]}.html"


def _keep_page(out_dir: Path, job: str, fingerprint: str) -> None:
    """A hard link to the page just written, named by its fingerprint: Snakemake deletes a rule's
    outputs before running it, so the campaign rule (run again whenever a record is added or edited)
    would otherwise rebuild every page. No second copy is stored; without link support, no link."""
    kept = _kept_page(out_dir, job, fingerprint)
    kept.parent.mkdir(exist_ok=True)
    for old in kept.parent.glob(f"{glob.escape(job)}.*.html"):  # this job's older pages (not job "x.y"'s)
        if re.fullmatch(re.escape(job) + r"\.[0-9a-f]{24}\.html", old.name):
            old.unlink(missing_ok=True)
    try:
        os.link(out_dir / f"{job}.html", kept)
    except OSError:
        pass


def _page_in_place(out_dir: Path, job: str, fingerprint: str) -> bool:
    """The page of this fingerprint is at campaign/<job>.html, put back from its kept link if removed."""
    page_path = out_dir / f"{job}.html"
    if page_path.is_file():
        return True
    try:
        os.link(_kept_page(out_dir, job, fingerprint), page_path)
    except OSError:
        return False
    return True


def write_campaign(data_root: Path, records_dir: Path, *, out_dir: Path | None = None,
                   invocation: str = "snakemake --profile iris", endpoint: str | None = None) -> Path:
    """campaign/index.html and campaign/<job>.html for every record (only the runs that changed are
    read and rewritten); returns the index's path."""
    data_root = Path(data_root)
    records_dir = Path(records_dir)
    records_dir = records_dir if records_dir.is_absolute() else data_root / records_dir
    out_dir = out_dir or data_root / "campaign"
    out_dir.mkdir(parents=True, exist_ok=True)
    generated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    revision = rlkeep_revision()
    settings = {"format": PAGES_FORMAT, "code": code_digest(), "invocation": invocation,
                "endpoint": endpoint or os.environ.get("HF_ENDPOINT")}
    with refresh_lock(out_dir / PAGES_LOCK):
        return _refresh(data_root, records_dir, out_dir, settings, generated_at=generated_at, revision=revision,
                        endpoint=endpoint)


def _refresh(data_root: Path, records_dir: Path, out_dir: Path, settings: dict[str, Any], *, generated_at: str,
             revision: str, endpoint: str | None) -> Path:
    invocation = settings["invocation"]
    state_path = out_dir / PAGES_STATE
    previous = _previous_runs(state_path, settings)
    runs: dict[str, dict[str, Any]] = {}
    record_files = sorted(records_dir.glob("*.yaml")) if records_dir.is_dir() else []
    for record_file in record_files:
        job = record_file.stem
        page_path = out_dir / f"{job}.html"
        fingerprint = job_fingerprint(record_file, data_root / job)  # before reading: a later change shows next time
        known = previous.get(job)
        if known is not None and known["fingerprint"] == fingerprint and _page_in_place(out_dir, job, fingerprint):
            runs[job] = known
            continue
        view = load_run(data_root, record_file, invocation)
        atomic_write_bytes(page_path, run_html(view, data_root / job, generated_at=generated_at, revision=revision,
                                               endpoint=endpoint, cache_dir=out_dir / ".plots").encode("utf-8"))
        _keep_page(out_dir, job, fingerprint)
        runs[job] = {"fingerprint": fingerprint, **index_entry(view, endpoint)}
        if view.record_error:
            runs[job]["refused"] = view.record_error
    index = out_dir / "index.html"
    atomic_write_bytes(index, index_from_entries(list(runs.values()), generated_at=generated_at,
                                                 revision=revision).encode("utf-8"))
    write_json(out_dir / REFUSED, refused_records(data_root, records_dir, runs))
    write_json(state_path, {"settings": settings, "runs": runs})
    return index


def refused_records(data_root: Path, records_dir: Path, runs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """campaign/refused.json: every record in records/ that does not load, with its error (file, field,
    what was expected) naming the file as planning does, from the data root; `refused` is empty when
    every record loads."""
    refused = []
    for job, run in sorted(runs.items()):
        if not run.get("refused"):
            continue
        path = records_dir / f"{job}.yaml"
        shown = str(path.relative_to(data_root)) if path.is_relative_to(data_root) else str(path)
        error = run["refused"].removeprefix(f"{path}: ")
        refused.append({"job": job, "file": shown, "error": f"{shown}: {error}"})
    return {"records": len(runs), "refused": refused}
