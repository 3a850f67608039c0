"""The campaign at a glance (issue 31), over job folders made by hand: the state and the step cells
from one function, the banner, the overlay plot and the table of selected checkpoints across runs,
and the run page's summary card, the rule as written and the folded tables."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlkeep.campaign import (index_entry, index_from_entries, load_campaign, load_run, overlay_svg, rule_as_written,
                             run_digest, run_html, run_state)
from rlkeep.campaign.digest import thin
from rlkeep.campaign.index_page import COLUMNS
from rlkeep.campaign.plots import _ticks
from rlkeep.pipeline import STEPS
from tests.support.campaign import blocked_run, campaign_root, completed_run, write_record
from tests.test_campaign import parse_rows


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list]:
    root = tmp_path_factory.mktemp("campaign")
    made = campaign_root(root, 40)
    return root, made, load_campaign(root, Path("records"))


def index_of(views: list) -> str:
    return index_from_entries([index_entry(view) for view in views], generated_at="t", revision="r")


def test_a_done_run_with_a_blocked_step_is_blocked_in_its_badge_and_its_cells() -> None:
    steps = {step.name: {"status": "completed"} for step in STEPS}
    steps["reclaim"] = {"status": "blocked", "reason": "the store refused DeleteObjects"}
    overall, cells = run_state({"done": True, "steps": steps}, started=True)
    assert overall == "blocked"
    assert [state for _, state, _ in cells].count("blocked") == 1
    steps["reclaim"] = {"status": "not_applicable"}
    assert run_state({"done": True, "steps": steps}, started=True)[0] == "done"
    assert run_state({"done": True, "steps": steps}, started=True, record_error="bad")[0] == "unreadable"


def test_every_row_state_agrees_with_its_cells(campaign) -> None:
    root, made, views = campaign
    rows = parse_rows(index_of(views))
    assert {job: row["state"] for job, row in rows.items()} == {job: state for job, (_, state) in made.items()}
    for job, row in rows.items():
        assert list(row["steps"]) == [step.name for step in STEPS], job
        blocked = "blocked" in row["steps"].values()
        assert blocked == (row["state"] == "blocked"), job
        assert row["kind"] == made[job][0]


def test_the_banner_names_every_run_that_needs_an_operator_and_why(campaign, tmp_path: Path) -> None:
    _, made, views = campaign
    text = index_of(views)
    banner = text[text.index('<section class="banner"'):text.index("</section>")]
    named = set(re.findall(r'<li data-job="([^"]+)">', banner))
    assert named == {job for job, (_, state) in made.items() if state == "blocked"}
    assert "sync logs: the store s3://runs/iris/" in banner and "runs need an operator" in banner
    # a record that does not load needs an operator too; a campaign with none says so
    write_record(tmp_path, {"job": "rl-bad", "user": "demo"})
    calm = index_of(load_campaign(tmp_path, Path("records")))
    assert '<li data-job="rl-bad">' in calm and "1 run needs an operator" in calm
    (tmp_path / "records" / "rl-bad.yaml").unlink()
    completed_run(tmp_path)
    assert "No run needs an operator." in index_of(load_campaign(tmp_path, Path("records")))


def test_overlay_has_one_line_per_run_with_its_selected_step_marked(campaign) -> None:
    root, _, views = campaign
    svg = overlay_svg([run_digest(view) for view in views])
    groups = dict(re.findall(r'<g class="run" data-job="([^"]+)"[^>]*>(.*?)</g>', svg))
    metrics = {view.job: root / view.job / "metrics" / "metrics.csv" for view in views}
    with_metrics = {job for job, path in metrics.items()
                    if path.is_file() and "reward/avg_raw_reward" in path.read_text().split("\n", 1)[0]}
    assert set(groups) == with_metrics and len(groups) > 5
    for job, body in groups.items():
        assert body.count("<polyline") == 2, job  # raw and smoothed
        selected = root / job / "checkpoint" / "selected.json"
        step = json.loads(selected.read_text()).get("step") if selected.is_file() else None
        marks = re.findall(r'class="sel"[^>]*data-step="(\d+)"', body)
        assert marks == ([str(step)] if step is not None else []), job
    assert f'data-runs="{len(groups)}"' in svg
    assert overlay_svg([]) == "<p>No run has logged a reward yet.</p>"


def test_checkpoint_table_agrees_with_each_runs_selected_json(campaign) -> None:
    root, _, views = campaign
    text = index_of(views)
    table = text[text.index('<table id="checkpoints">'):]
    table = table[:table.index("</table>")]
    shown = dict(re.findall(r'<tr data-job="([^"]+)">.*?<td class="step">(\d+)</td>', table))
    expected = {}
    for path in root.glob("*/checkpoint/selected.json"):
        step = json.loads(path.read_text()).get("step")
        if step is not None:
            expected[path.parent.parent.name] = str(step)
    assert shown == expected and expected


def test_columns_share_the_width_and_thinning_keeps_the_ends() -> None:
    assert sum(float(width.rstrip("%")) for _, width, _ in COLUMNS) == pytest.approx(100)
    xs = list(range(1000))
    points = thin(xs, [x / 10 for x in xs], 60)
    assert len(points) == 60 and points[0] == [0, 0.0] and points[-1] == [999, 99.9]
    assert _ticks(0, 193) == [0, 50, 100, 150] and _ticks(-0.13, 1.02) == [0, 0.5, 1.0]


RECORD_WITH_A_COMMENTED_RULE = """job: rl-ema
user: demo
scheduler: iris
cluster: cw-test
chain: [/demo/rl-ema]
store: s3://runs/iris/rl-ema
base_model: Qwen/Qwen3-8B
checkpoint:
  interval: 20
  # the last complete save: the run was stopped by hand at its best
  rule: {kind: latest}
archive: {dest: s3://runs/archives}
"""


def test_run_page_opens_with_the_summary_and_the_rule_as_written(tmp_path: Path) -> None:
    completed_run(tmp_path, "rl-ema")
    (tmp_path / "records" / "rl-ema.yaml").write_text(RECORD_WITH_A_COMMENTED_RULE)
    assert rule_as_written(RECORD_WITH_A_COMMENTED_RULE).splitlines() == RECORD_WITH_A_COMMENTED_RULE.splitlines()[7:11]
    view = load_run(tmp_path, tmp_path / "records" / "rl-ema.yaml")
    text = run_html(view, tmp_path / "rl-ema", generated_at="t", revision="r")
    body = text[text.index("<body>"):]
    card = body[body.index('<section class="card" id="summary"'):body.index("</section>")]
    assert body.index('id="summary"') < body.index("<h2>Steps</h2>") < body.index("<h2>Metrics</h2>")
    for fact in ("Selected step <strong>40</strong>", "latest rule: the last complete save", "best <strong>0.5",
                 "Qwen/Qwen3-8B", "preserved", "s3://runs/archives"):
        assert fact in card, fact
    assert "# the last complete save: the run was stopped by hand at its best\n  rule: {kind: latest}" in card
    assert "{&#x27;kind&#x27;" not in text and "{'kind'" not in text  # never the rule as a Python dict
    assert "<figcaption>" not in text


def test_long_tables_are_folded_with_their_row_count(tmp_path: Path) -> None:
    blocked_run(tmp_path)
    text = run_html(load_run(tmp_path, tmp_path / "records" / "rl-stuck.yaml"), tmp_path / "rl-stuck",
                    generated_at="t", revision="r")
    assert f"<details><summary>Every step, its state and its reason or what remains ({len(STEPS)} rows)</summary>" in text
    assert "AccessDenied" in text[text.index('id="summary"'):text.index("<h2>Steps</h2>")]
    for caption in re.findall(r"<caption>([^<]*)</caption>", text):  # no caption repeats a heading
        assert f">{caption}</h2>" not in text and f">{caption}</h3>" not in text
