"""Publication checks (docs/contract.md §7): what makes a downloaded model repo a
complete publication (weights, config, tokenizer, training_logs/, a model card whose Training
Traces section links the trace dataset), and `rlkeep check-publication`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rlkeep.export.layout import TOKENIZER_REQUIREMENT, has_tokenizer

PUBLIC_HUB = "https://huggingface.co"
TRACES_HEADING = "## Training Traces"
# A dataset link at any Hub: huggingface.co, a mirror, or another address of the same Hub (an
# endpoint can move between invocations, e.g. a local server on a new port). A check compares the
# repo id it names, which identifies the dataset wherever it is served; the address does not.
DATASET_URL_RE = re.compile(
    r"https?://[^\s()<>\[\]\"']*?/datasets/([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)")


def markdown_section(text: str, heading: str) -> str | None:
    """Body of the first `heading` line outside code fences, up to the next heading of level <= 2."""
    level = len(heading) - len(heading.lstrip("#"))
    lines, body, inside, fenced = text.splitlines(), [], False, False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and inside and re.match(rf"^#{{1,{level}}}\s", line):
            break
        if inside:
            body.append(line)
        elif not fenced and line.rstrip().rstrip("#").rstrip() == heading:
            inside = True
    return "\n".join(body) if inside else None


def dataset_links(text: str) -> list[str]:
    """`<namespace>/<name>` of every Hub dataset URL in text, whichever Hub serves it."""
    return [f"{match.group(1)}/{match.group(2).rstrip('.')}" for match in DATASET_URL_RE.finditer(text)]


def check_publication(model_dir: Path, *, expected_dataset: str | None = None,
                      pending_traces_link: bool = False) -> list[str]:
    """Problems that keep `model_dir` (a downloaded model repo) from being a complete publication.

    expected_dataset: when given, the Training Traces link must name this dataset (by repo id, at
    whatever Hub address).
    pending_traces_link: every check but the link, for a model published before its trace dataset
    was verified: the card's Training Traces section must exist and link no dataset yet.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return [f"{model_dir}: not a directory"]
    problems = _weight_problems(model_dir)
    problems += _config_problems(model_dir)
    if not has_tokenizer({path.name for path in model_dir.iterdir() if path.is_file()}):
        problems.append(f"{model_dir}: no tokenizer file (expected {TOKENIZER_REQUIREMENT})")
    logs = model_dir / "training_logs"
    if not logs.is_dir():
        problems.append("training_logs/: missing (trainer logs and metrics must be published with the model)")
    elif not any(path.is_file() and path.stat().st_size > 0 for path in logs.rglob("*")):
        problems.append("training_logs/: empty (no non-empty file)")
    problems += _card_problems(model_dir, expected_dataset, pending_traces_link)
    return problems


def _weight_problems(model_dir: Path) -> list[str]:
    weights = sorted(path for path in model_dir.glob("*.safetensors") if path.is_file())
    if not weights:
        return [f"{model_dir}: no top-level *.safetensors weights file"]
    problems = [f"{path.name}: empty weights file" for path in weights if path.stat().st_size == 0]
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return problems + [f"{index.name}: unreadable weight_map ({type(error).__name__})"]
        problems += [f"{index.name}: references missing shard {shard}" for shard in sorted(shards)
                     if not (model_dir / shard).is_file()]
    return problems


def _config_problems(model_dir: Path) -> list[str]:
    config = model_dir / "config.json"
    if not config.is_file():
        return ["config.json: missing (model configuration)"]
    try:
        if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
            return ["config.json: not a JSON object"]
    except ValueError as error:
        return [f"config.json: not valid JSON ({error})"]
    return []


def _card_problems(model_dir: Path, expected_dataset: str | None, pending_traces_link: bool = False) -> list[str]:
    card = model_dir / "README.md"
    if not card.is_file():
        return ["README.md: missing (model card with a '## Training Traces' section)"]
    section = markdown_section(card.read_text(encoding="utf-8", errors="replace"), TRACES_HEADING)
    if section is None:
        return [f"README.md: no '{TRACES_HEADING}' section"]
    links = dataset_links(section)
    if pending_traces_link:
        return [f"README.md: the '{TRACES_HEADING}' section links {', '.join(links)} before the trace dataset "
                "is verified (the link is added once verify/traces.json exists)"] if links else []
    if not links:
        return [f"README.md: the '{TRACES_HEADING}' section links no Hugging Face dataset "
                f"(expected a link like {PUBLIC_HUB}/datasets/<namespace>/<name>, at any Hub)"]
    if expected_dataset and expected_dataset not in links:
        return [f"README.md: the '{TRACES_HEADING}' section links {', '.join(links)}, "
                f"not the trace dataset {expected_dataset}"]
    return []


def check_publication_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep check-publication",
                                     description="Check that a downloaded model repo is a complete publication.")
    parser.add_argument("dir", type=Path, help="the downloaded model repo")
    parser.add_argument("--endpoint", default=None,
                        help="no effect, kept for scripts that pass it: a dataset link counts at any Hub address and "
                             "is compared by repo id")
    parser.add_argument("--dataset", default=None, help="the trace dataset the card must link (namespace/name)")
    parser.add_argument("--pending-traces-link", action="store_true",
                        help="every check but the link: the card's Training Traces section must exist and link no "
                             "dataset yet (a model published before its trace dataset was verified)")
    args = parser.parse_args(argv)
    if args.pending_traces_link and args.dataset:
        parser.error("--dataset names the link that --pending-traces-link says is not there yet; pass one of them")
    if args.endpoint:
        print("rlkeep check-publication: --endpoint is no longer needed (a dataset link counts at any Hub address "
              "and is compared by repo id); ignored", file=sys.stderr)
    problems = check_publication(args.dir, expected_dataset=args.dataset, pending_traces_link=args.pending_traces_link)
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"{args.dir}: {len(problems)} problem(s); not a complete model publication")
        return 1
    if args.pending_traces_link:
        print(f"{args.dir}: model publication complete but for the Training Traces link, which is pending "
              "(weights, config, tokenizer, training_logs/, Training Traces section)")
        return 0
    print(f"{args.dir}: complete model publication (weights, config, tokenizer, training_logs/, Training Traces link)")
    return 0
