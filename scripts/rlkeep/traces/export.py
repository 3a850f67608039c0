"""Trials to shards: read each trial, apply the filter, write its rows and count what happened
(malformed reasons, redactions, repairs) into the manifest body."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.traces.render import Conversation, episode_conversations, whole_conversation
from rlkeep.traces.schema import MAIN_SOURCE, column_names, row_schema
from rlkeep.traces.shards import ShardWriter
from rlkeep.traces.text import Scrubber, TextRedactor
from rlkeep.traces.trial import MalformedTrial, MediaContent, TrialRows, keep_trial, read_trial
from rlkeep.traces.trials import TrialContent

EPISODES = ("last", "all")
FILTERS = ("none", "success", "failure")
FILTER_RULES = {"none": "every readable trial", "success": "reward > 0 and no exception",
                "failure": "the rest: reward missing or <= 0, or an exception (a timed-out trial included)"}
MALFORMED_EXAMPLES = 10


def trial_rows(trial: TrialRows, episodes: str) -> Iterator[tuple[Conversation, dict[str, str | None]]]:
    """The main trajectory's rows, then each subagent's, labelled in trace_source."""
    for source, contexts, overrides in trial.sources:
        found = episode_conversations(contexts, episodes) if source == MAIN_SOURCE else whole_conversation(contexts)
        for episode, conversation in found:
            yield conversation, dict(trial.columns, **overrides, episode=f"episode-{episode}", trace_source=source)


def export_rows(trials: Iterable[TrialContent], data_dir: Path, *, episodes: str, filter: str,
                redactor: TextRedactor, trials_per_shard: int, clean_terminal_noise: bool = False,
                sharegpt: bool = False) -> dict[str, Any]:
    """Turn trials (in sorted name order) into shards in data_dir; return the manifest body."""
    scrub = Scrubber(redactor, clean_terminal_noise)
    writer = ShardWriter(data_dir, trials_per_shard, schema=row_schema(sharegpt))
    malformed: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    result_count = exported = filtered_out = row_count = 0
    try:
        for content in trials:
            if content.result is not None:
                result_count += 1
            try:
                trial = read_trial(content, scrub, scrub.repairs)
            except MalformedTrial as problem:
                malformed[problem.reason] += 1
                names = examples.setdefault(problem.reason, [])
                if len(names) < MALFORMED_EXAMPLES:
                    names.append(content.name)
                continue
            except MediaContent as found:
                if keep_trial(found.success, filter):
                    raise RlkeepError(f"trace export refused: trial {content.name}: {found}. Harbor's exporter refuses "
                                      "multimodal trajectories too (text rows would silently lose the media): leave "
                                      "the trial out of the trace tree or export it with a multimodal pipeline") from None
                filtered_out += 1
                continue
            if not keep_trial(trial.success, filter):
                filtered_out += 1
                continue
            rows = writer.add_trial(trial_rows(trial, episodes))
            row_count += rows
            exported += 1 if rows else 0
        shards = writer.finish()
    except BaseException:
        writer.abort()
        raise
    covered = exported + filtered_out
    return {
        "result_count": result_count,
        "row_count": row_count,
        "result_coverage": covered / result_count if result_count else 1.0,
        "trials_exported": exported,
        "trials_filtered_out": filtered_out,
        "coverage_basis": "(trials_exported + trials_filtered_out) / result_count; trial dirs with "
                          "result.json count, rows do not (episodes=all gives several rows per trial)",
        "shards": shards,
        "malformed": dict(sorted(malformed.items())),
        "malformed_examples": {key: examples[key] for key in sorted(examples)},
        "filter": filter,
        "filter_rule": FILTER_RULES[filter],
        "episodes": episodes,
        "columns": column_names(sharegpt),
        "text_changes": {
            "credentials_redacted": True,
            "lone_surrogates_replaced": True,
            "terminal_noise_cleaned": clean_terminal_noise,
        },
        "trials_per_shard": trials_per_shard,
        "tool_definitions": writer.tool_definitions,
        "redactions": dict(sorted(scrub.redactions.items())),
        "repairs": dict(sorted(scrub.repairs.items())),
    }
