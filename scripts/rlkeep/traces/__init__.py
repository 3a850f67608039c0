"""Trace dataset: rebuild from the full trace tree, shard deterministically, gate on coverage.

The package, in the order a trial travels: `tarsafe` (checked tar members, safe extraction),
`trials` (trial discovery in a trace root or a streamed tar), `trial` (one trial's files into
metadata and contexts), `render` (contexts into conversations, Harbor 0.26's way), `schema`
(columns, arrow types, Features metadata), `text` (surrogates, terminal noise, redaction),
`shards` (parquet writing), `export` (trials into shards and the manifest body), `coverage` (the
gate), `stage` (the stage folder), `card` (the dataset card), `build` (the whole build), `cli`
(`rlkeep traces-dataset`) and `step` (the pipeline step).

Input is the sync step's `trace_jobs.tar` (member names relative to the trace root, e.g.
`<trial>/result.json`) or an already extracted trace root. Every trial directory is read:
`result.json`, the ATIF `agent/trajectory.json` with the continuations its
`continued_trajectory_ref` chain names, the subagent trajectories `agent/trajectory.<kind>.json`, and `verifier/test-stdout.txt` +
`test-stderr.txt`. Rows are Harbor 0.26 `traces export` rows (rendering: rlkeep.traces.render;
columns: `column_names(sharegpt)`, Harbor's order); shards are
`data/train-iiiii-of-nnnnn.parquet` carrying the `huggingface` Features metadata, next to
`trace_export_manifest.json` and the dataset card README.md (rlkeep.traces.card).

Decisions worth knowing (the manifest states the ones a reader of the data needs):
- Trial order is the sorted trial directory name; shard k holds the rows of the k-th group of
  `trials_per_shard` trials that produced rows, so the index advances only for non-empty
  shards. Same input, same options and same pyarrow version give the same bytes: fixed
  schema, fixed writer options, no timestamps.
- `result` (as Harbor 0.26): the exception type when result.json has one (a trial that timed out
  and was still verified is its `AgentTimeoutError`), else `rewards["reward"]` as
  `str(float(reward))` (its text when not a number), else null. `filter="success"` keeps trials
  whose `result` is a number above 0; `"failure"` the rest.
- `model` is the trajectory's `agent.model_name` as written (`hosted_vllm/Qwen3-8B`).
- `verifier_output` is test-stdout then test-stderr joined with nothing (Harbor's join).
- `instruction` (as Harbor 0.26): in the first trajectory file by name that is not a
  summarization, the first step's non-blank message, stripped (system or user).
- `agent`/`model`: main rows name the trajectory's `agent` block; subagent rows the run's agent
  (result.json) and the subagent trajectory's model. `model_provider` and `run_id` follow
  Harbor's fallbacks through result.json (agent_info.model_info.provider; config.job_id, ...,
  else the trial name).
- Where Harbor's table leaves a column out (it keeps the first row's keys only), rlkeep writes
  it anyway, empty: `tool_definitions` null, `trace_source` `main`.
- `tool_definitions` (as Harbor's `datasets` table): a list of structs, the type inferred from the
  distinct definitions (their strings redacted) in trial order, exactly as `datasets` infers it, so
  `load_dataset` gives Harbor's Features. It stays JSON text, recorded in the manifest's
  `tool_definitions`, when no trial has definitions or the type cannot be stored (see
  schema.tool_definitions_type).
- Text is what the model saw: credentials are always redacted (counts per kind reach the
  manifest and the card) and lone surrogates, which parquet text cannot hold, become U+FFFD.
  Terminal-noise cleaning (ANSI/OSC escapes, bracketed-paste markers, carriage-return
  overwrites, other control characters, orphaned `</think>`) is an option, off by default, and
  recorded in the manifest's `text_changes` and the card.
- A trajectory whose first message is an agent turn is counted as malformed (`no_user_turn`)
  rather than given an invented prompt.
- An image or audio content part in a kept trial refuses the export (RlkeepError naming the
  trial, file, step and field), as Harbor's MultimodalExportError refuses it: text rows would
  silently lose the media. A trial the filter leaves out does not (Harbor filters first).
- Coverage = (trials with at least one row + trials excluded by the filter) / trial dirs with
  result.json, 1.0 when there are none. With episodes=all row_count can exceed result_count,
  so trials are counted, not rows. Malformed trials are counted by reason; `missing_result`
  (agent/ without result.json: the trial never finished) is reported but is not part of
  result_count.
- Output: the build happens in a sibling work dir `.<out>.build-*`; a passing build replaces
  our earlier shards and card (an operator's README.md is kept) and then writes the manifest,
  which is the completion marker. A build under the coverage gate withdraws the previous
  shards, card and manifest and leaves `trace_export_manifest.rejected.json` for inspection.
"""
from __future__ import annotations

from rlkeep.traces.build import build_trace_dataset
from rlkeep.traces.card import CARD_MARKER, CARD_NAME, CardInfo, render_card
from rlkeep.traces.cli import cli_main
from rlkeep.traces.coverage import DEFAULT_MIN_COVERAGE, CoverageError, coverage_message
from rlkeep.traces.export import EPISODES, FILTER_RULES, FILTERS, export_rows
from rlkeep.traces.render import Context, Conversation, episode_conversations, whole_conversation
from rlkeep.traces.schema import (
    COLUMNS, CONVERSATION_TYPE, MAIN_SOURCE, SHAREGPT_COLUMN, SHARD_NAME, TEXT_COLUMNS, column_names, hf_features,
    row_schema,
)
from rlkeep.traces.shards import DEFAULT_TRIALS_PER_SHARD, ROW_GROUP_CHARS, SCHEMA, ShardWriter
from rlkeep.traces.stage import (
    DATA_DIR, MANIFEST_NAME, REJECTED_MANIFEST_NAME, check_stage_folder, foreign_files,
)
from rlkeep.traces.step import stage_traces_step
from rlkeep.traces.tarsafe import safe_extract, unsafe_member_reason
from rlkeep.traces.text import Scrubber, TextRedactor, clean_text, replace_lone_surrogates
from rlkeep.traces.trial import MalformedTrial, TrialRows, instruction_text, keep_trial, read_trial
from rlkeep.traces.trials import TarTrials, TrialContent, TrialFiles, iter_trials, needed_for_export

__all__ = [
    "CARD_MARKER", "CARD_NAME", "COLUMNS", "CONVERSATION_TYPE", "DATA_DIR", "DEFAULT_MIN_COVERAGE",
    "DEFAULT_TRIALS_PER_SHARD", "EPISODES", "FILTERS", "FILTER_RULES", "MAIN_SOURCE", "MANIFEST_NAME",
    "REJECTED_MANIFEST_NAME", "ROW_GROUP_CHARS", "SCHEMA", "SHAREGPT_COLUMN", "SHARD_NAME", "TEXT_COLUMNS",
    "CardInfo", "Context", "Conversation", "CoverageError", "MalformedTrial", "Scrubber", "ShardWriter",
    "TarTrials", "TextRedactor", "TrialContent", "TrialFiles", "TrialRows", "build_trace_dataset",
    "check_stage_folder", "clean_text", "cli_main", "column_names", "coverage_message", "episode_conversations",
    "export_rows", "foreign_files", "hf_features", "instruction_text", "iter_trials", "keep_trial",
    "needed_for_export", "read_trial", "render_card", "replace_lone_surrogates", "row_schema", "safe_extract",
    "stage_traces_step", "unsafe_member_reason", "whole_conversation",
]
