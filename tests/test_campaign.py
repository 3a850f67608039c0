"""The campaign page builders (rlkeep/campaign.py) over job folders made by hand."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlkeep.campaign import (archive_summary, attempt_timeline, destination_links, esc, hub_url, index_html,
                             load_campaign, load_run, storage_bytes, write_views)
from rlkeep.pipeline import STEPS
from tests.support.campaign import (BLOCKED_REASON, blocked_run, completed_run, local_links, not_started, resolve,
                                    write_record)


CELL_STATES = {"c": "completed", "b": "blocked", "p": "pending", "n": "not_applicable"}


class Rows(HTMLParser):
    """{job: {"state", "kind", "user", "steps": {step: status} (the strip's cells in pipeline order),
    "tips": {step: the blocked cell's full text}, "text": ...}} of the rows of table#runs."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict] = {}
        self.current: dict | None = None
        self.table: str | None = None
        self.tip: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.table = attrs.get("id")
        if tag == "tr" and "data-job" in attrs and self.table == "runs":
            self.current = self.rows.setdefault(attrs["data-job"], {
                "state": attrs["data-state"], "kind": attrs["data-kind"], "user": attrs["data-user"],
                "hidden": "hidden" in attrs, "cells": [], "steps": {}, "tips": {}, "text": ""})
        if self.current is not None and tag in {"i", "button"} and attrs.get("class") in CELL_STATES:
            self.current["cells"].append(CELL_STATES[attrs["class"]])
        if self.current is not None and attrs.get("role") == "tooltip":
            self.tip = STEPS[len(self.current["cells"]) - 1].name
            self.current["tips"][self.tip] = ""

    def handle_endtag(self, tag):
        if tag == "tr" and self.current is not None:
            self.current["steps"] = dict(zip([step.name for step in STEPS], self.current["cells"]))
            self.current = None
        if tag == "table":
            self.table = None
        if tag == "span":
            self.tip = None

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data
            if self.tip:
                self.current["tips"][self.tip] += data


def parse_rows(text: str) -> dict[str, dict]:
    parser = Rows()
    parser.feed(text)
    return parser.rows


@pytest.fixture
def root(tmp_path: Path) -> Path:
    completed_run(tmp_path)
    blocked_run(tmp_path)
    not_started(tmp_path)
    return tmp_path


def build(root: Path, monkeypatch: pytest.MonkeyPatch, endpoint: str | None = None) -> Path:
    if endpoint is None:
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    return write_views(root, Path("records"), invocation="snakemake --profile iris")


def test_one_row_per_record_with_each_steps_state(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = parse_rows(build(root, monkeypatch).read_text())
    assert {job: row["state"] for job, row in rows.items()} == {
        "rl-done": "done", "rl-stuck": "blocked", "rl-later": "not_started"}
    assert rows["rl-done"]["steps"] == {step.name: "not_applicable" if step.name == "reclaim" else "completed"
                                        for step in STEPS}
    stuck = rows["rl-stuck"]["steps"]
    assert stuck["capture_chain"] == stuck["stop_retries"] == "completed"
    assert stuck["sync_logs"] == "blocked"
    assert {stuck[s.name] for s in STEPS if s.name not in {"capture_chain", "stop_retries", "sync_logs"}} == {"pending"}
    assert set(rows["rl-later"]["steps"].values()) == {"pending"}


def test_blocked_reason_is_in_the_title_and_the_text_escaped(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = build(root, monkeypatch).read_text()
    rows = parse_rows(text)
    assert rows["rl-stuck"]["tips"] == {"sync_logs": f"sync logs: blocked: {BLOCKED_REASON}"}
    assert BLOCKED_REASON in rows["rl-stuck"]["text"]
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "snakemake --profile iris rl-stuck/DONE" in rows["rl-stuck"]["text"]
    assert "snakemake --profile iris rl-later/DONE" in rows["rl-later"]["text"]
    assert "rl-done/DONE" not in rows["rl-done"]["text"]


def test_hub_links_follow_hf_endpoint(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = build(root, monkeypatch).read_text()
    assert 'href="https://huggingface.co/demo/rl-done"' in text
    assert 'href="https://huggingface.co/datasets/demo/rl-done-traces"' in text
    assert 'href="https://wandb.ai/team/project/runs/rl-done"' in text
    assert 'href="s3://' not in text  # the archive is named, not linked
    text = build(root, monkeypatch, "http://127.0.0.1:9/hub/").read_text()
    assert 'href="http://127.0.0.1:9/hub/demo/rl-done"' in text
    assert 'href="http://127.0.0.1:9/hub/datasets/demo/rl-done-traces"' in text
    assert hub_url("a b/c\"d", "model", "https://h") == "https://h/a%20b/c%22d"


def test_tracker_that_is_not_http_is_not_a_link() -> None:
    links = destination_links({"destinations": "not_applicable", "tracker_url": "javascript:alert(1)"})
    assert links == [("tracker", "javascript:alert(1)", None)]


def test_storage_bytes(root: Path) -> None:
    done = load_run(root, root / "records" / "rl-done.yaml")
    assert storage_bytes(done) == {"preserved": 10_000, "reclaimed": 0, "reclaimable": 10_500}
    (root / "rl-done" / "reclaim.json").write_text(
        '{"status": "completed", "deleted_bytes": 10000, "planned_bytes": 10500}')
    assert storage_bytes(load_run(root, root / "records" / "rl-done.yaml")) == {
        "preserved": 10_000, "reclaimed": 10_000, "reclaimable": 500}
    later = load_run(root, root / "records" / "rl-later.yaml")
    assert storage_bytes(later) == {"preserved": None, "reclaimed": 0, "reclaimable": None}


def test_timeline_marks_stopped_dead_and_unrecorded(root: Path) -> None:
    rows = attempt_timeline(load_run(root, root / "records" / "rl-done.yaml"))
    assert [(r["n"], r["id"], r["state"]) for r in rows] == [
        (1, "/demo/rl-done", "failed"), (2, "/demo/rl-done-r1", "killed"), (None, "/demo/rl-done-r9", "running")]
    assert any(note.startswith("dead") for note in rows[0]["notes"])
    assert any("stopped by rlkeep" in note for note in rows[1]["notes"])
    assert "unrecorded" in rows[2]["notes"][0] and "may still write checkpoints" in rows[2]["notes"][0]
    later = attempt_timeline(load_run(root, root / "records" / "rl-later.yaml"))
    assert [r["id"] for r in later] == ["/demo/rl-later", "/demo/rl-later-r1"]
    assert all(r["state"] == "not captured yet" for r in later)


def test_archive_summary_counts() -> None:
    summary = archive_summary("run=x\nkept\t10\ta\nkept\t20\tb\nskipped\t5\tc\tcache\n")
    assert summary == {"summary": "run=x", "entries": 3, "kept": 2, "skipped": 1}
    assert archive_summary(None) is None


def test_run_page_shows_selection_candidates_verification_and_links(root: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(root, monkeypatch)
    page = index.parent / "rl-done.html"
    text = page.read_text()
    assert "Selected step <strong>40</strong>" in text and "latest rule: the last complete save" in text
    assert "abc123" in text and "def456" in text  # the verified commits
    assert "<td>2</td>" in text and "<td>1</td>" in text  # MANIFEST kept / skipped
    stuck = (index.parent / "rl-stuck.html").read_text()
    assert esc(BLOCKED_REASON) in stuck and "snakemake --profile iris rl-stuck/DONE" in stuck
    for html_page in index.parent.glob("*.html"):
        links = local_links(html_page.read_text())
        assert links, html_page
        missing = [link for link in links if not resolve(html_page, link).exists()]
        assert not missing, (html_page, missing)


def test_every_page_is_self_contained(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(root, monkeypatch)
    for html_page in index.parent.glob("*.html"):
        text = html_page.read_text()
        assert "<script src" not in text and "<link" not in text and "@import" not in text and "url(" not in text
        assert 'scope="col"' in text and "<h1>" in text and "<h2" in text  # real headers and headings
        assert "rlkeep revision" in text and "<footer>" in text


def test_a_refused_and_an_unreadable_record_are_shown_with_their_errors(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    write_record(tmp_path, {"job": "rl-bad", "user": "demo"})  # YAML that validation refuses
    (tmp_path / "records" / "rl-broken.yaml").write_text("job: rl-broken\nchain: [unclosed\n")
    views = load_campaign(tmp_path, Path("records"))
    assert {v.job: v.overall for v in views} == {"rl-bad": "refused", "rl-broken": "unreadable"}
    assert "rl-bad.yaml" in views[0].record_error
    text = index_html(views, generated_at="t", revision="r")
    rows = parse_rows(text)
    assert rows["rl-bad"]["state"] == "refused" and "\u2715 refused" in rows["rl-bad"]["text"]
    assert rows["rl-broken"]["state"] == "unreadable" and "! unreadable" in rows["rl-broken"]["text"]
    assert "record error" in text
    assert "2 runs need an operator" in text


def test_no_records_gives_an_empty_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "records").mkdir()
    text = build(tmp_path, monkeypatch).read_text()
    assert "0 records: no records" in text and parse_rows(text) == {}


def test_run_page_has_the_run_analysis_and_names_a_bad_table(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = build(root, monkeypatch).parent / "rl-done.html"
    text = page.read_text()
    assert "<td>210</td><td>70.0%</td>" in text  # timing/generate: 60 + 150 s of 300 s step time
    assert "Not available: no trial table" in text
    (root / "rl-done" / "metrics" / "metrics.csv").write_text("step,x\n1,2\n")
    text = build(root, monkeypatch).parent.joinpath("rl-done.html").read_text()
    assert "Not read: " in text and "metrics.csv" in text and "Not available: no step logged timing/step" in text


def test_run_page_plots_are_cached_per_job(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(root, monkeypatch)
    plots = root / "rl-done" / ".work" / "plots"
    first = sorted(p.name for p in plots.iterdir() if p.is_file())
    assert len(first) == 1 and first[0].startswith("rl-done-")
    text = (index.parent / "rl-done.html").read_text()
    assert 'alt="Reward per global step, raw and EMA-smoothed' in text and "data:image/png;base64," in text
    (plots / "rl-done-x-0123456789abcdef01234567.json").write_text("[]")  # another job's ("rl-done-x")
    metrics = root / "rl-done" / "metrics" / "metrics.csv"
    metrics.write_text(metrics.read_text() + "3,rl-done,150,90,0.75\n")
    build(root, monkeypatch)
    second = sorted(p.name for p in plots.iterdir() if p.is_file())
    assert "rl-done-x-0123456789abcdef01234567.json" in second and first[0] not in second and len(second) == 2


def test_run_page_draws_the_chain_and_keeps_its_table(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import html
    import re
    import xml.etree.ElementTree as ET

    text = (build(root, monkeypatch).parent / "rl-done.html").read_text()
    start = text.index("<h2>Chain</h2>")
    chain = text[start:text.index("<h2>", start + 1)]
    figure = re.search(r"<figure>(<svg .*?</svg>)</figure>", chain)
    assert figure is not None
    svg = ET.fromstring(figure[1])  # well-formed markup
    rows = attempt_timeline(load_run(root, root / "records" / "rl-done.yaml"))
    alt = html.unescape(svg.get("aria-label"))
    assert svg.findtext("{http://www.w3.org/2000/svg}title") == alt
    assert f"The chain of {len(rows)} attempts drawn in chain order (the scheduler reported no times)" in alt
    assert len(svg.findall("{http://www.w3.org/2000/svg}rect")) == len(rows)  # one bar per lane
    for row in rows:  # every lane named in the alt text, and the table still says it in text
        assert str(row["id"]) in alt and f"<code>{esc(row['id'])}</code>" in chain
    assert alt.endswith("#1 /demo/rl-done: failed (dead); #2 /demo/rl-done-r1: killed (stopped); "
                        "unrecorded /demo/rl-done-r9: running (unrecorded)")


def test_run_page_has_vllm_and_batch_error_sections(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkeep.batch_errors import scan_lines as scan_batches
    from rlkeep.generation_stats import GenerationStats, render
    from rlkeep.vllm_stats import scan_lines as scan_vllm
    from tests.test_run_report import BATCH_LOG, VLLM_LOG

    text = (build(root, monkeypatch).parent / "rl-done.html").read_text()
    assert "Not available: generation_stats has not run" in text
    stats = GenerationStats()
    scan_vllm(VLLM_LOG.splitlines(), "a1", stats.vllm)
    scan_batches(BATCH_LOG.splitlines(), "a1", stats.errors)
    for name, data in render(stats, job="rl-done").items():
        (root / "rl-done" / "metrics" / name).write_bytes(data)
    text = (build(root, monkeypatch).parent / "rl-done.html").read_text()
    assert "<th scope=\"row\">generation throughput (tokens/s, all engines)</th><td>29.0</td><td>70.0</td>" in text
    assert "<th scope=\"row\">failed</th><td>37</td><td>28.9%</td>" in text
    assert 'alt="metrics/vllm.png: vLLM throughput' in text


def test_chain_figure_uses_the_schedulers_times_when_it_has_them() -> None:
    import xml.etree.ElementTree as ET

    from rlkeep.campaign.chain_figure import timeline_svg

    rows = [{"n": 1, "id": "/u/run", "state": "failed", "marks": ["dead"], "recorded": True,
             "started_ms": 1_700_000_000_000, "finished_ms": 1_700_003_600_000},
            {"n": 2, "id": "/u/run-r1", "state": "pending", "marks": ["stopped"], "recorded": True,
             "submitted_ms": 1_700_004_000_000},
            {"n": None, "id": "/u/run-r9", "state": "running", "marks": ["unrecorded"], "recorded": False}]
    alt, markup = timeline_svg(rows)
    assert alt == ("The chain of 3 attempts drawn on the scheduler's times: #1 /u/run: failed (dead); "
                   "#2 /u/run-r1: pending (stopped); unrecorded /u/run-r9: running (unrecorded)")
    svg = ET.fromstring(markup)
    ns = "{http://www.w3.org/2000/svg}"
    bars = [rect for rect in svg.iter(f"{ns}rect") if rect.get("stroke") == "#222"]
    texts = [t.text for t in svg.iter(f"{ns}text")]
    # the failed attempt spans its hour from the left edge; the pending one starts after it and is unfinished
    first, second, third = bars
    assert first.get("fill") == "#c62828" and float(first.get("x")) == 190.0
    assert float(second.get("x")) > float(first.get("x")) + float(first.get("width"))
    assert third.get("fill") == "#1565c0" and third.get("stroke-dasharray") and first.get("stroke-dasharray") is None
    assert "running (unrecorded), no times reported" in texts
    assert "pending (stopped), unfinished" in texts and "11-14 22:13" in texts and "UTC (scheduler times)" in texts
    assert timeline_svg([]) is None


# --------------------------------------------------------------------------- refreshing only what changed


def page_identities(root: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of each run page: a rewrite (atomic, a new file) changes the inode."""
    return {path.stem: (path.stat().st_ino, path.stat().st_mtime_ns)
            for path in (root / "campaign").glob("*.html") if path.name != "index.html"}


def test_a_refresh_rewrites_only_the_pages_of_runs_that_changed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(root, monkeypatch)
    first = page_identities(root)
    first_index = index.stat().st_ino
    assert set(first) == {"rl-done", "rl-stuck", "rl-later"}

    build(root, monkeypatch)
    assert page_identities(root) == first           # nothing changed: no run page rewritten
    assert index.stat().st_ino != first_index       # the index is always written

    # rl-stuck's sync_logs now succeeded and rl-later started: both pages and rows follow, rl-done's stays
    (root / "rl-stuck" / "sync").mkdir()
    (root / "rl-stuck" / "sync" / "logs.manifest.json").write_text('{"status": "completed", "bytes": 1}')
    (root / "rl-later" / "logs").mkdir(parents=True)
    rows = parse_rows(build(root, monkeypatch).read_text())
    now = page_identities(root)
    assert now["rl-done"] == first["rl-done"]
    assert now["rl-stuck"] != first["rl-stuck"] and now["rl-later"] != first["rl-later"]
    assert rows["rl-stuck"]["steps"]["sync_logs"] == "completed"
    assert rows["rl-later"]["state"] == "in_progress"
    assert rows["rl-done"]["state"] == "done"

    # an edited record counts too
    record_file = root / "records" / "rl-done.yaml"
    record_file.write_text(record_file.read_text() + "# reviewed\n")
    build(root, monkeypatch)
    assert page_identities(root)["rl-done"] != first["rl-done"]


def test_a_missing_page_or_an_unreadable_memo_rebuilds(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(root, monkeypatch)
    (root / "campaign" / "rl-done.html").unlink()
    build(root, monkeypatch)
    assert "rl-done" in (root / "campaign" / "rl-done.html").read_text()

    first = page_identities(root)
    for job in ("rl-done", "rl-stuck"):
        (root / job / ".work" / "views.json").write_text("{half")
    rows = parse_rows(build(root, monkeypatch).read_text())
    now = page_identities(root)
    assert now["rl-done"] != first["rl-done"] and now["rl-stuck"] != first["rl-stuck"]
    assert now["rl-later"] == first["rl-later"]  # not started: its page is unchanged but for the time
    assert set(rows) == {"rl-done", "rl-stuck", "rl-later"}


def test_the_campaign_folder_holds_pages_only_and_a_removed_records_page_goes(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for older in (".pages/rl-done.0123.html", ".plots/rl-done-0123.json", "logs/campaign.log"):  # an older rlkeep's
        (root / "campaign" / older).parent.mkdir(parents=True, exist_ok=True)
        (root / "campaign" / older).write_text("kept by an older rlkeep")
    (root / "campaign" / ".pages.json").write_text("{}")
    build(root, monkeypatch)
    assert sorted(path.name for path in (root / "campaign").iterdir()) == [
        "index.html", "refused.json", "rl-done.html", "rl-later.html", "rl-stuck.html"]
    (root / "records" / "rl-later.yaml").unlink()
    rows = parse_rows(build(root, monkeypatch).read_text())
    assert set(rows) == {"rl-done", "rl-stuck"} and not (root / "campaign" / "rl-later.html").exists()


def test_other_rlkeep_code_rebuilds_every_page(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlkeep.campaign.writer as writer

    build(root, monkeypatch)
    first = page_identities(root)
    build(root, monkeypatch)
    assert page_identities(root) == first
    monkeypatch.setattr(writer, "code_digest", lambda: "another version of rlkeep")
    build(root, monkeypatch)
    # a run that has not started is rendered every time and written when its page differs
    assert all(page_identities(root)[job] != first[job] for job in ("rl-done", "rl-stuck"))
