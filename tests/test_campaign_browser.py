"""The campaign pages in a real headless Chromium (Debian's chromium, installed by .ci/run), made by
`rlkeep campaign`, and by the refresh that ends the real pipeline's `<job>/DONE` run."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from rlkeep.campaign import index_entry, index_from_entries, load_campaign, run_html
from rlkeep.pipeline import STEPS
from tests.conftest import run_snakemake, seed_example
from tests.support.campaign import (BLOCKED_REASON, blocked_run, campaign_root, chromium_path, completed_run,
                                    local_links, measured, measured_at_width, not_started, render, resolve)
from tests.test_campaign import parse_rows

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (.ci/run installs it)")

COMPLETED_CELL = (0xD7, 0xF0, 0xD9)
BLOCKED_CELL = (0xFB, 0xD5, 0xD5)
PENDING_CELL = (0xFF, 0xF1, 0xC2)


def screenshot_colours(page: Path, tmp_path: Path, name: str) -> set[tuple[int, int, int]]:
    shot = tmp_path / f"{name}.png"
    rendered = render(page, tmp_path / f"profile-{name}", screenshot=shot, size="2600,1400")
    assert rendered.console == []
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 22)
    assert colours is not None and len(colours) > 20, f"{shot} looks blank"
    return {colour for _, colour in colours}


def check_in_browser(index: Path, tmp_path: Path, expected_states: dict[str, str]) -> dict[str, dict]:
    """Open the index and every run page: rendered, no console message, links resolve; the rows as shown."""
    rendered = render(index, tmp_path / "profile-index")
    assert rendered.console == [], rendered.console
    assert '<div id="controls">' in rendered.dom  # the inline script ran and showed the sort/filter controls
    rows = parse_rows(rendered.dom)
    assert {job: row["state"] for job, row in rows.items()} == expected_states
    pages = [index, *(index.parent / f"{job}.html" for job in expected_states)]
    for page in pages:
        dom = render(page, tmp_path / f"profile-{page.stem}").dom if page != index else rendered.dom
        links = local_links(dom)
        assert links, page
        missing = [link for link in links if not resolve(page, link).exists()]
        assert missing == [], (page, missing)
    colours = screenshot_colours(index, tmp_path, "index")
    assert {COMPLETED_CELL, BLOCKED_CELL, PENDING_CELL} <= colours
    return rows


def test_console_errors_are_caught(tmp_path: Path) -> None:
    """The check below can fail: a page with a script error reports it."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>missingFunction();</script></body></html>")
    assert any("missingFunction" in line for line in render(page, tmp_path / "profile").console)


def test_rlkeep_campaign_pages_in_chromium(data_root: Path, tmp_path: Path) -> None:
    completed_run(data_root)
    blocked_run(data_root)
    not_started(data_root)
    result = subprocess.run([sys.executable, "-m", "rlkeep", "campaign", "--data-root", str(data_root)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(data_root / "campaign" / "index.html")
    index = data_root / "campaign" / "index.html"
    rows = check_in_browser(index, tmp_path, {"rl-done": "done", "rl-stuck": "blocked", "rl-later": "not_started"})
    assert rows["rl-stuck"]["steps"]["sync_logs"] == "blocked"
    assert BLOCKED_REASON in rows["rl-stuck"]["text"]
    assert "rl-stuck/DONE" in rows["rl-stuck"]["text"] and "--profile" in rows["rl-stuck"]["text"]
    run_page = render(data_root / "campaign" / "rl-stuck.html", tmp_path / "profile-stuck")
    assert run_page.console == []
    assert "AccessDenied &lt;script&gt;" in run_page.dom and "rl-stuck/DONE" in run_page.dom
    screenshot_colours(data_root / "campaign" / "rl-done.html", tmp_path, "run")


def test_pipeline_refreshes_the_campaign_after_a_run(data_root: Path, bucket: str, iris, tmp_path: Path) -> None:
    """A real finished run (the example on the S3 server), beside a blocked and a not-started record:
    the `rl-demo/DONE` invocation alone rebuilds the whole campaign on success."""
    seed_example(data_root, bucket, iris)
    blocked_run(data_root)
    not_started(data_root)
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr[-3000:]
    index = data_root / "campaign" / "index.html"
    rows = check_in_browser(index, tmp_path, {"rl-demo": "done", "rl-stuck": "blocked", "rl-later": "not_started"})
    status = json.loads((data_root / "rl-demo" / "STATUS.json").read_text())
    assert rows["rl-demo"]["steps"] == {step.name: status["steps"][step.name]["status"] for step in STEPS}
    run_page = (data_root / "campaign" / "rl-demo.html").read_text()
    assert 'src="data:image/png;base64,' in run_page and 'alt="metrics/reward.png' in run_page
    selected = json.loads((data_root / "rl-demo" / "checkpoint" / "selected.json").read_text())
    assert f"Selected step <strong>{selected['step']}</strong>" in run_page
    # the run analysis (rlkeep/run_report.py) is in the surface's and the trial table's reports, and on the page
    report = (data_root / "rl-demo" / "metrics" / "report.md").read_text()
    assert "## Per-category summaries" in report and "## Timing tree" in report and "| timing/generate |" in report
    trials = (data_root / "rl-demo" / "metrics" / "trials.md").read_text()
    assert "## Trial phases" in trials and "| agent_execution phase |" in trials and "success rate" in trials
    assert "Timing tree" in run_page and "Trial phases" in run_page and "Not available" not in run_page
    # Snakemake's own report over the report() outputs (README: Seeing the campaign)
    snakemake_report = data_root / "report.html"
    made = run_snakemake(data_root, "rl-demo/DONE", extra=("--report", str(snakemake_report)))
    assert made.returncode == 0 and snakemake_report.is_file(), made.stderr[-3000:]
    assert "WARNING" not in made.stderr and "Duplicate explicit target" not in made.stderr, made.stderr[-3000:]
    text = snakemake_report.read_text()
    assert "rlkeep campaign" not in text  # the campaign page is beside it (campaign/index.html), not in it
    captions = ("Reward per global step", "The metric surface: one row", "Trial analysis: phase durations",
                "The completion record of the run")  # report/*.rst: present only for report() outputs
    assert all(caption in text for caption in captions), [c for c in captions if c not in text]
    # --report report.zip: the same report as a folder tree in a zip, with the figures as files
    zipped = data_root / "report.zip"
    made = run_snakemake(data_root, "rl-demo/DONE", extra=("--report", str(zipped)))
    assert made.returncode == 0 and zipped.is_file(), made.stderr[-3000:]
    with zipfile.ZipFile(zipped) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        figures = {Path(name).name: archive.read(name) for name in names if name.endswith(".png")}
        assert any(name.endswith("report.html") for name in names), names
    for figure in ("reward.png", "vllm.png"):
        assert figures.get(figure) == (data_root / "rl-demo" / "metrics" / figure).read_bytes(), (figure, names)


def test_pipeline_reports_vllm_utilisation_and_batch_errors(data_root: Path, bucket: str, iris) -> None:
    """generation_stats on the example run's trainer logs: batch errors per attempt and step agree with
    the trajectories the same steps' metrics count, and vLLM's reports are summed per second."""
    import csv

    seed_example(data_root, bucket, iris)
    result = run_snakemake(data_root, "rl-demo/DONE")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = data_root / "rl-demo" / "metrics"
    report = (metrics / "generation.md").read_text()
    assert "## vLLM utilisation" in report and "## Batch errors" in report and "Not available" not in report
    with (metrics / "batch_errors.csv").open(newline="") as handle:
        batches = {(row["attempt"], row["step"]): row for row in csv.DictReader(handle)}
    rows = []
    for name in ("metrics.csv", "superseded.csv"):
        with (metrics / name).open(newline="") as handle:
            rows += list(csv.DictReader(handle))
    compared = 0
    for row in rows:
        batch = batches.get((row["attempt"], row["global_step"]))
        if batch is None:
            continue
        timeouts = int(float(row["generate/num_timeout_trajectories"]))
        errors = int(float(row["generate/num_error_trajectories"]))
        assert (int(batch.get("AgentTimeoutError") or 0), int(batch.get("NonZeroAgentExitCodeError") or 0),
                int(batch["failed"])) == (timeouts, errors, timeouts + errors), (row["attempt"], row["global_step"])
        compared += 1
    assert compared >= 40
    with (metrics / "vllm.csv").open(newline="") as handle:
        seconds = list(csv.DictReader(handle))
    assert seconds and all(int(row["engines"]) >= 1 and float(row["generation_tokens_per_s"]) > 0 for row in seconds)
    assert (metrics / "vllm.png").read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------------- a campaign of 300 runs (issue 31)


@pytest.fixture(scope="module")
def campaign_300(tmp_path_factory: pytest.TempPathFactory):
    """300 records, every kind in every state, and their index made by the functions the writer calls."""
    root = tmp_path_factory.mktemp("campaign300")
    made = campaign_root(root, 300)
    views = load_campaign(root, Path("records"))
    index = root / "campaign" / "index.html"
    index.parent.mkdir()
    index.write_text(index_from_entries([index_entry(view) for view in views], generated_at="t", revision="r"))
    return root, made, views, index


def test_300_run_index_filters_to_blocked_and_fits_1400_px(campaign_300, tmp_path: Path) -> None:
    import re

    root, made, views, index = campaign_300
    blocked = {job for job, (_, state) in made.items() if state == "blocked"}
    assert len(blocked) == 60 and {made[job][0] for job in blocked} == {"rl", "sft", "datagen", "eval"}
    assert index.stat().st_size < 2_000_000
    rendered = render(index, tmp_path / "profile-filtered", fragment="#state=blocked")
    assert rendered.console == [], rendered.console
    rows = parse_rows(rendered.dom)
    assert len(rows) == 300 and {job for job, row in rows.items() if not row["hidden"]} == blocked
    assert "60 of 300 runs shown" in rendered.dom
    banner = rendered.dom[rendered.dom.index('id="banner"'):]
    banner = banner[:banner.index("</section>")]
    assert set(re.findall(r'<li data-job="([^"]+)">', banner)) == blocked and "60 runs need an operator" in banner
    overlay = rendered.dom[rendered.dom.index('<svg id="overlay"'):rendered.dom.index("</svg>")]
    lines = re.findall(r'<g class="run" data-job="([^"]+)"( style="[^"]*display: none[^"]*")?', overlay)
    assert len(lines) == sum(1 for _, (kind, state) in made.items()
                             if kind in {"rl", "sft"} and state in {"done", "in_progress"})
    assert all(hidden for job, hidden in lines)  # no blocked run has logged a reward: every line is filtered away
    kind_rows = parse_rows(render(index, tmp_path / "profile-kind", fragment="#kind=eval&state=done").dom)
    assert {job for job, row in kind_rows.items() if not row["hidden"]} == {
        job for job, (kind, state) in made.items() if kind == "eval" and state == "done"}
    layout = measured(index, tmp_path / "profile-layout",
                      "{scroll:document.documentElement.scrollWidth,client:document.documentElement.clientWidth}")
    assert layout["scroll"] <= layout["client"] <= 1400, layout
    # a blocked cell is a button: focused (Tab or click), its full reason shows
    tip = measured(index, tmp_path / "profile-focus",
                   "(function(){var b=document.querySelector('#runs .strip button'),"
                   "t=document.getElementById(b.getAttribute('aria-describedby'));"
                   "var before=getComputedStyle(t).display;b.focus();"
                   "return {before:before,after:getComputedStyle(t).display,text:t.textContent,"
                   "focused:document.activeElement===b};})()")
    assert tip["before"] == "none" and tip["after"] == "block" and tip["focused"], tip
    assert tip["text"].startswith("sync logs: blocked: the store s3://runs/iris/run-") and "rlkeep stopped" in tip["text"]


def test_run_page_first_screen_holds_the_summary_card(campaign_300, tmp_path: Path) -> None:
    root, made, views, _ = campaign_300
    view = next(v for v in views if made[v.job] == ("rl", "done") and int(v.job.split("-")[1]) % 3)  # with times
    page = root / "campaign" / f"{view.job}.html"
    page.write_text(run_html(view, root / view.job, generated_at="t", revision="r"))
    rendered = render(page, tmp_path / "profile-run")
    assert rendered.console == []
    card = rendered.dom[rendered.dom.index('<section class="card" id="summary"'):]
    card = card[:card.index("</section>")]
    selected = json.loads((root / view.job / "checkpoint" / "selected.json").read_text())["step"]
    for fact in (f"Selected step <strong>{selected}</strong>", "best <strong>", "final <strong>",
                 "<dt>base model</dt><dd>org/base-", "ran 20", "preserved (DONE) 2026-11-"):
        assert fact in card, fact
    box = measured(page, tmp_path / "profile-box", "document.getElementById('summary').getBoundingClientRect()")
    assert 0 < box["top"] and box["bottom"] <= 1000, box  # inside the first screen at 1,400 x 1,000


# --------------------------------------------------------------------------- from a phone to a wide screen

# Every state badge in view, scrolled to in turn: the topmost element at its centre and at its
# corners is the badge itself (nothing painted over it), and the page scrolls only downwards.
LAYOUT_PROBE = """(function(){
  var root=document.documentElement, badges=document.querySelectorAll('.badge'), covered=[];
  for(var i=0;i<badges.length&&i<40;i++){
    var b=badges[i]; b.scrollIntoView({block:'center'}); var r=b.getBoundingClientRect();
    [[r.left+r.width/2,r.top+r.height/2],[r.left+2,r.top+2],[r.right-2,r.top+2],[r.left+2,r.bottom-2],
     [r.right-2,r.bottom-2]].forEach(function(p){
      var top=document.elementFromPoint(p[0],p[1]);
      if(!top||!(top===b||b.contains(top))) covered.push((b.closest('[data-job]')||b.parentNode).getAttribute('data-job')+
        ' covered by '+(top?top.tagName+'.'+top.className:'nothing (off screen)'));
    });
  }
  return {width:innerWidth,scroll:root.scrollWidth,client:root.clientWidth,badges:badges.length,covered:covered.slice(0,10),
          cards:getComputedStyle(document.querySelector('#runs tr')||document.body).display};
})()"""


@pytest.mark.parametrize("width", [360, 390, 1400, 2560])
def test_pages_fit_from_a_phone_to_a_wide_screen(campaign_300, tmp_path: Path, width: int) -> None:
    root, made, views, index = campaign_300
    view = next(v for v in views if made[v.job] == ("rl", "blocked"))
    page = root / "campaign" / f"{view.job}.html"
    page.write_text(run_html(view, root / view.job, generated_at="t", revision="r"))
    for name, shown in (("index", index), ("run", page)):
        layout = measured_at_width(shown, tmp_path / f"profile-{name}-{width}", LAYOUT_PROBE, width)
        assert layout["width"] == width, layout
        assert layout["scroll"] <= layout["client"], (name, width, layout)  # nothing overflows sideways
        assert layout["badges"] >= 1 and layout["covered"] == [], (name, width, layout)
        if name == "index":  # one card per run on a phone, the table's rows on a wide screen
            assert layout["cards"] == ("grid" if width < 900 else "table-row"), layout
        render(shown, tmp_path / f"profile-shot-{name}-{width}", screenshot=tmp_path / f"{name}-{width}.png",
               size=f"{width},900")
