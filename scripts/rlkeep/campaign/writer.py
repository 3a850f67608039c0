"""The one writer of what people read about runs: each started job's `STATUS.json`, the campaign
pages `campaign/index.html` and `campaign/<job>.html`, and `campaign/refused.json`.

`write_views` is called at the end of every Snakemake invocation (rules/invocation.smk: no-op, `-n` and
failures included) and by `rlkeep campaign`; nothing else writes these files, and no rule has
them as outputs. Each is a function of the records and the job folders only (`render_run`,
`render_index`): a test renders them afresh and compares.

Over a campaign of hundreds of runs most did not change since the last invocation, and a run page
costs tens of milliseconds and a few hundred KB. So each started job keeps, in `<job>/.work/`
(which the fingerprint leaves out), a memo of what its views are made from (the record file and
the job folder's listing, rlkeep.folderstate, with rlkeep's code, the invocation and the Hub
endpoint) and its index entry; a job whose fingerprint is unchanged and whose STATUS.json and page
are in place is not read again. A job lock in the same folder keeps two invocations that end
together from leaving an older page under a newer memo. A job that has not started has no folder
and nothing to remember; its page is cheap (the record alone).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from rlkeep.campaign.index_page import index_entry, index_from_entries
from rlkeep.campaign.markup import without_made_at
from rlkeep.campaign.run_page import run_html
from rlkeep.campaign.views import load_run
from rlkeep.folderstate import code_digest, job_fingerprint, refresh_lock
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.profiles import default_invocation
from rlkeep.report import rlkeep_revision

STATUS = "STATUS.json"
REFUSED = "refused.json"  # the records that do not load, for scripts (docs/records.md)
INDEX = "index.html"
# in <job>/.work/: what the last refresh made the views from, its lock, the run's plot cache
VIEW_MEMO = "views.json"
VIEW_LOCK = "views.lock"
PLOT_CACHE = "plots"
# raise when the views change in a way the fingerprint cannot see
VIEWS_FORMAT = 5
# what an older rlkeep kept beside the pages (a `campaign` rule's log, its page store and plot cache)
LEGACY = (".pages", ".pages.json", ".pages.lock", ".plots", "logs")
# STATUS.json is not made from itself; `.work/` holds what rlkeep derives (rlkeep.folderstate)
FINGERPRINT_SKIPS = frozenset({".work", STATUS})


def view_settings(invocation: str, endpoint: str | None) -> dict[str, Any]:
    """What changes every run's views at once: rlkeep's code, the continuing command, the Hub."""
    return {"format": VIEWS_FORMAT, "code": code_digest(), "invocation": invocation, "endpoint": endpoint}


def render_run(data_root: Path, record_file: Path, *, invocation: str, endpoint: str | None, generated_at: str,
               revision: str, plot_cache: Path | None = None) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(STATUS.json's content, the run page, the run's index entry), from the record and the job
    folder as they are now."""
    job_dir = data_root / record_file.stem
    view = load_run(data_root, record_file, invocation)
    page = run_html(view, job_dir, generated_at=generated_at, revision=revision, endpoint=endpoint,
                    cache_dir=plot_cache)
    entry = index_entry(view, endpoint)
    if view.record_error:
        entry["refused"] = view.record_error
    return view.status, page, entry


def render_index(entries: list[dict[str, Any]], *, generated_at: str, revision: str) -> str:
    """campaign/index.html from every record's index entry, in record order."""
    return index_from_entries(entries, generated_at=generated_at, revision=revision)


def write_views(data_root: Path, records_dir: Path, *, invocation: str | None = None,
                endpoint: str | None = None) -> Path:
    """STATUS.json of every started job and the campaign pages of every record (only the runs that
    changed are read and rewritten); returns the index's path."""
    invocation = invocation or default_invocation()
    data_root = Path(data_root)
    records_dir = Path(records_dir)
    records_dir = records_dir if records_dir.is_absolute() else data_root / records_dir
    out_dir = data_root / "campaign"
    out_dir.mkdir(parents=True, exist_ok=True)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT")
    clock = {"generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "revision": rlkeep_revision()}
    settings = view_settings(invocation, endpoint)
    entries: dict[str, dict[str, Any]] = {}
    record_files = sorted(records_dir.glob("*.yaml")) if records_dir.is_dir() else []
    for record_file in record_files:
        job_dir = data_root / record_file.stem
        if job_dir.is_dir():
            with refresh_lock(job_dir / ".work" / VIEW_LOCK):
                entries[record_file.stem] = _refresh_started(data_root, record_file, out_dir, settings, clock)
        else:
            _, page, entries[record_file.stem] = render_run(data_root, record_file, invocation=invocation,
                                                            endpoint=endpoint, **clock)
            _write_page(out_dir / f"{record_file.stem}.html", page)
    _remove_strays(out_dir, entries)
    index = out_dir / INDEX
    atomic_write_bytes(index, render_index(list(entries.values()), **clock).encode("utf-8"))
    write_json(out_dir / REFUSED, refused_records(data_root, records_dir, entries))
    return index


def _remove_strays(out_dir: Path, entries: dict[str, dict[str, Any]]) -> None:
    """campaign/ holds the pages of the records there are, and refused.json: a removed record's page
    goes, and so does what an older rlkeep kept there."""
    for page_path in out_dir.glob("*.html"):
        if page_path.name != INDEX and page_path.stem not in entries:
            page_path.unlink(missing_ok=True)
    for name in LEGACY:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _refresh_started(data_root: Path, record_file: Path, out_dir: Path, settings: dict[str, Any],
                     clock: dict[str, str]) -> dict[str, Any]:
    """A started job's STATUS.json and page, rewritten when what they are made of changed; its entry."""
    job_dir = data_root / record_file.stem
    page_path = out_dir / f"{record_file.stem}.html"
    memo_path = job_dir / ".work" / VIEW_MEMO
    fingerprint = job_fingerprint(record_file, job_dir, settings, skip_at_top=FINGERPRINT_SKIPS)
    memo = _memo(memo_path)
    if memo is not None and memo["fingerprint"] == fingerprint and page_path.is_file() \
            and (job_dir / STATUS).is_file():
        return memo["entry"]
    status, page, entry = render_run(data_root, record_file, invocation=settings["invocation"],
                                     endpoint=settings["endpoint"], plot_cache=job_dir / ".work" / PLOT_CACHE,
                                     **clock)
    _write_status(job_dir / STATUS, status, clock["generated_at"])
    atomic_write_bytes(page_path, page.encode("utf-8"))
    try:  # best effort: without the memo the views are only made again next time
        write_json(memo_path, {"fingerprint": fingerprint, "entry": entry})
    except OSError:
        pass
    return entry


def _memo(path: Path) -> dict[str, Any] | None:
    try:
        memo = read_json(path)
    except (FileNotFoundError, ValueError, OSError):
        return None
    if not isinstance(memo, dict) or not isinstance(memo.get("fingerprint"), str) \
            or not isinstance(memo.get("entry"), dict) or not isinstance(memo["entry"].get("digest"), dict):
        return None
    return memo


def _write_status(path: Path, status: dict[str, Any], written_at: str) -> None:
    """STATUS.json, left alone when only its time would change (scripts watch its mtime)."""
    try:
        previous = read_json(path)
        if isinstance(previous, dict) and {k: v for k, v in previous.items() if k != "written_at"} == status:
            return
    except (FileNotFoundError, ValueError, OSError):
        pass
    write_json(path, {**status, "written_at": written_at})


def _write_page(path: Path, page: str) -> None:
    """A page with no memo to compare with (its run has no folder): left alone when only its time
    would change, so a refresh rewrites no page of a run that did not change."""
    try:
        if without_made_at(path.read_text(encoding="utf-8")) == without_made_at(page):
            return
    except (OSError, UnicodeDecodeError):
        pass
    atomic_write_bytes(path, page.encode("utf-8"))


def refused_records(data_root: Path, records_dir: Path, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """campaign/refused.json: every record in records/ that does not load, with its error (file, field,
    what was expected) naming the file as planning does, from the data root; `refused` is empty when
    every record loads."""
    refused = []
    for job, entry in sorted(entries.items()):
        if not entry.get("refused"):
            continue
        path = records_dir / f"{job}.yaml"
        shown = str(path.relative_to(data_root)) if path.is_relative_to(data_root) else str(path)
        error = entry["refused"].removeprefix(f"{path}: ")
        refused.append({"job": job, "file": shown, "error": f"{shown}: {error}"})
    return {"records": len(entries), "refused": refused}


def cli_main(argv: list[str]) -> int:
    """`rlkeep campaign [--data-root D]`: write the views without Snakemake (what every invocation
    does at its end), e.g. after editing records on a machine where nothing else runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="rlkeep campaign", description=cli_main.__doc__)
    parser.add_argument("--data-root", type=Path, default=Path("."), help="the data root (default: here)")
    parser.add_argument("--records", type=Path, default=Path("records"), help="records folder, from the data root")
    parser.add_argument("--invocation", default=None,
                        help="the command the pages say continues a run (default: `snakemake --profile` and the "
                        "name of the iris profile that runs this checkout: iris, or iris-<checkout> when "
                        "another checkout owns iris)")
    args = parser.parse_args(argv)
    records = args.records if args.records.is_absolute() else args.data_root / args.records
    if not records.is_dir():
        parser.error(f"{records} is not a folder of records (--data-root is the folder with records/)")
    index = write_views(args.data_root, records, invocation=args.invocation)
    print(index)
    return 0
