"""The trace dataset card links the policy model at the Hub it was published to (issue 54): the
endpoint in HF_ENDPOINT or the one given, never the public Hub's address by default."""
from __future__ import annotations

from typing import Any

import pytest

from rlkeep.traces.card import CardInfo, render_card

MANIFEST: dict[str, Any] = {
    "redactions": {}, "text_changes": {"terminal_noise_cleaned": False}, "result_count": 2,
    "trials_exported": 2, "trials_filtered_out": 0, "result_coverage": 1.0, "min_coverage": 0.95,
    "row_count": 2, "shards": [{"name": "train-00000.parquet"}], "episodes": "last", "filter": "none",
    "filter_rule": "every trial", "columns": ["conversations"], "malformed": [],
}


def model_line(card: str) -> str:
    return next(line for line in card.splitlines() if line.startswith("- Policy model:"))


def test_card_links_the_model_at_hf_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:8765/")
    card = render_card(MANIFEST, CardInfo(job="rl-x", dataset_repo="org/rl-x-traces", model_repo="org/rl-x"))
    assert model_line(card) == "- Policy model: [org/rl-x](http://127.0.0.1:8765/org/rl-x)"


def test_card_links_the_model_at_the_endpoint_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    info = CardInfo(job="rl-x", dataset_repo="org/rl-x-traces", model_repo="org/rl-x", endpoint="http://hub.test")
    assert model_line(render_card(MANIFEST, info)) == "- Policy model: [org/rl-x](http://hub.test/org/rl-x)"


def test_page_links_follow_the_recorded_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages link a published repo where its verification says it went, whatever Hub is in use now."""
    from rlkeep.campaign.views import destination_links
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    status = {"destinations": {"model": "org/rl-x", "traces": "org/rl-x-traces"}}
    verify = {"model_upload": {"repo_id": "org/rl-x", "url": "http://127.0.0.1:9/org/rl-x"},
              "traces": {"repo_id": "org/rl-x-traces", "url": "http://127.0.0.1:9/datasets/org/rl-x-traces"}}
    links = {label: href for label, _, href in destination_links(status, None, verify)}
    assert links == {"model": "http://127.0.0.1:9/org/rl-x", "traces": "http://127.0.0.1:9/datasets/org/rl-x-traces"}
    unverified = {label: href for label, _, href in destination_links(status, None, {})}
    assert unverified["model"] == "https://huggingface.co/org/rl-x"
