"""STATUS.json and the campaign pages have one writer (issue 30): whatever an invocation did (a
step failed, Snakemake had nothing to do, `-n` only showed the plan) and whatever was removed, the
files equal what a fresh render of the records and job folders gives. Real Snakemake subprocesses
over generated datagen runs in file stores (no scheduler to stand in for).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from rlkeep.campaign.markup import without_made_at
from rlkeep.campaign.writer import refused_records, render_index, render_run
from rlkeep.report import invocation_from_argv, rlkeep_revision
from rlkeep_dev.example.kinds import write_datagen_run
from tests.conftest import REPO, run_snakemake, write_record

# what run_snakemake's Snakemake process reads from its own command line
INVOCATION = invocation_from_argv([sys.executable, "--snakefile", str(REPO / "Snakefile"),
                                   "--profile", str(REPO / "profiles" / "local")])


def seed(tmp_path: Path, data_root: Path, job: str) -> Path:
    run = write_datagen_run(tmp_path / "runs" / job, job=job, n_trials=12)
    write_record(data_root, run.record(store_url=f"file://{run.root}"))
    return run.root


def assert_views_are_a_fresh_render(data_root: Path, endpoint: str | None = None) -> None:
    """Every STATUS.json, page, the index and refused.json as render_run/render_index give them now
    (less the time each was made), and nothing else under campaign/. `endpoint`: the HF_ENDPOINT the
    pipeline ran with (default: this process's)."""
    campaign = data_root / "campaign"
    entries = {}
    for record_file in sorted((data_root / "records").glob("*.yaml")):
        job = record_file.stem
        status, page, entries[job] = render_run(data_root, record_file, invocation=INVOCATION,
                                                endpoint=endpoint or os.environ.get("HF_ENDPOINT"), generated_at="now",
                                                revision=rlkeep_revision())
        assert without_made_at((campaign / f"{job}.html").read_text()) == without_made_at(page), job
        if (data_root / job).is_dir():
            written = json.loads((data_root / job / "STATUS.json").read_text())
            assert {key: value for key, value in written.items() if key != "written_at"} == status, job
    index = render_index(list(entries.values()), generated_at="now", revision=rlkeep_revision())
    assert without_made_at((campaign / "index.html").read_text()) == without_made_at(index)
    assert json.loads((campaign / "refused.json").read_text()) == refused_records(
        data_root, data_root / "records", entries)
    assert sorted(path.name for path in campaign.iterdir()) == sorted(
        ["index.html", "refused.json", *(f"{job}.html" for job in entries)])


def test_views_equal_a_fresh_render_after_a_failure_a_no_op_a_plan_and_a_removal(tmp_path: Path,
                                                                                  data_root: Path) -> None:
    seed(tmp_path, data_root, "dg-ok")
    blocked_root = seed(tmp_path, data_root, "dg-blocked")
    traces = blocked_root / "trace_jobs"
    moved = tmp_path / "moved-traces"
    shutil.move(traces, moved)  # sync_traces of dg-blocked fails: no trace objects under its prefix

    failed = run_snakemake(data_root)
    assert failed.returncode != 0
    assert (data_root / "dg-ok" / "DONE").is_file() and not (data_root / "dg-blocked" / "DONE").exists()
    status = json.loads((data_root / "dg-blocked" / "STATUS.json").read_text())
    assert "sync_traces" in status["blocked"]
    assert_views_are_a_fresh_render(data_root)

    # removed views, then an invocation with nothing to do: Snakemake runs no onsuccess handler then
    for path in ("campaign/dg-ok.html", "campaign/index.html", "campaign/refused.json", "dg-ok/STATUS.json"):
        (data_root / path).unlink()
    no_op = run_snakemake(data_root, "dg-ok/DONE")
    assert no_op.returncode == 0 and "Nothing to be done" in no_op.stdout + no_op.stderr
    assert_views_are_a_fresh_render(data_root)

    # the cause fixed, a page removed, and only the plan shown: the page shows the run as it is
    shutil.move(moved, traces)
    (data_root / "campaign" / "dg-blocked.html").unlink()
    (data_root / "dg-blocked" / "STATUS.json").unlink()
    plan = run_snakemake(data_root, extra=("-n",))
    assert plan.returncode == 0 and "dg-blocked/DONE" in plan.stdout
    assert_views_are_a_fresh_render(data_root)

    # the same command goes on, and the views follow it to DONE
    again = run_snakemake(data_root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((data_root / "dg-blocked" / "STATUS.json").read_text())["remaining_work"] == []
    assert_views_are_a_fresh_render(data_root)
