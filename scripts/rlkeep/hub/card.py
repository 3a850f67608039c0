"""The model card: README.md rendered from the record and the run's evidence with its Training
Traces link pending, and the same card once the trace dataset is verified, linking it.
"""
from __future__ import annotations

import json
import re
from typing import Any

import yaml

from rlkeep.errors import RlkeepError
from rlkeep.hub.checks import TRACES_HEADING
from rlkeep.hub.client import check_repo_id

TRACES_PENDING = ("The link to this run's agent trace dataset is pending trace verification: it is added here "
                  "once the dataset, rebuilt from the full durable trace tree, has passed its coverage gate and "
                  "its remote verification.")


def traces_section_body(repo_id: str, url: str) -> str:
    return f"The agent traces of this run are the dataset [{repo_id}]({url}), rebuilt from the full durable trace tree."


def render_model_card(*, job: str, publish: dict[str, Any], base_model: str | None, selected: dict[str, Any],
                      export: dict[str, Any], chain: dict[str, Any], tracker_url: str | None,
                      training_logs: list[str]) -> str:
    """README.md with YAML front matter, its Training Traces link pending (link_traces_in_card adds
    it once the trace dataset is verified). base_model comes from the record only, never guessed."""
    front: dict[str, Any] = {}
    if base_model:
        front["base_model"] = base_model
    front["library_name"] = "transformers"
    front["tags"] = ["reinforcement-learning", "agentic", "skyrl", "harbor", "rlkeep"]
    attempts = [a.get("id") for a in chain.get("attempts", [])]
    rule = selected.get("rule") or {}
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
        f"# {publish['model'].split('/', 1)[1]}", "",
        f"Policy checkpoint of the agentic RL run `{job}` (SkyRL trainer, Harbor agent traces), "
        "preserved and published by rlkeep.", "",
        "## Run", "",
        f"- Attempts (chronological): {', '.join(f'`{a}`' for a in attempts)}",
        f"- Base model: {f'`{base_model}`' if base_model else 'not recorded (rlkeep never guesses it)'}",
    ]
    if tracker_url:
        lines.append(f"- Tracker: {tracker_url}")
    lines += [
        "", "## Selected checkpoint", "",
        f"- Step: {selected.get('step')}",
        f"- Rule: `{json.dumps(rule, sort_keys=True)}`",
        f"- Why: {selected.get('rationale', '')}",
        f"- Source format: {export.get('format', 'unknown')}; parameters (counted from the tensors): "
        f"{export.get('parameter_count', 'unknown')}",
        "", "## Training logs", "",
        "`training_logs/` holds the metric surface across the chain, its report and every attempt's trainer log "
        "(the per-trial results are in the trace dataset):", "",
        *[f"- `training_logs/{name}`" for name in training_logs],
        "", TRACES_HEADING, "",
        TRACES_PENDING, "",
    ]
    return "\n".join(lines)


def _replace_section(text: str, heading: str, body: str) -> str:
    """`text` with the body of its first `heading` section (outside code fences) replaced."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = end = None
    fenced = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced:
            continue
        if start is None and line.rstrip().rstrip("#").rstrip() == heading:
            start = index
        elif start is not None and re.match(rf"^#{{1,{level}}}\s", line):
            end = index
            break
    if start is None:
        raise RlkeepError(f"the model card has no '{heading}' section to complete")
    end = len(lines) if end is None else end
    return "\n".join([*lines[:start + 1], "", body, "", *lines[end:]]).rstrip("\n") + "\n"


def link_traces_in_card(card: str, repo_id: str, url: str) -> str:
    """The model card with its Training Traces section linking the verified trace dataset and
    `datasets:` in its front matter naming it (the Hub shows the link from there too)."""
    check_repo_id(repo_id)
    if card.startswith("---\n") and (close := card.find("\n---\n", 4)) != -1:
        front = yaml.safe_load(card[4:close]) or {}
        if not isinstance(front, dict):
            raise RlkeepError("the model card's front matter is not a YAML mapping")
        front["datasets"] = [repo_id]
        card = "---\n" + yaml.safe_dump(front, sort_keys=False) + card[close + 1:]
    return _replace_section(card, TRACES_HEADING, traces_section_body(repo_id, url))
