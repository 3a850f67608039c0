"""The metric surface across a run's chain of attempts, the per-trial table, and their outputs.

Trainer stdout is the portable metric source (SkyRL writes no metrics file). Each log is
scanned once, in bounded memory, for every serialization rlkeep knows (docs/reference.md, formats §2):

- ``wandb-json``: ``WANDB_MIRROR kind=<k> step=<n> metrics={json}`` lines. Only ``kind=train``
  rows feed the surface; ``kind=eval`` rows are kept apart (``Surface.eval_rows``, ``eval.csv``)
  because eval runs at its own cadence and W&B shows it on its own panels.
- ``skyrl-console``: a ``Step N:`` header followed by a pprint-ed dict (floats as strings).
- ``python-dict``: legacy ``{'async/... 'trainer/global_step': N}`` blocks with no header.
  Unlike the regex in the reference parser, a dict is accepted whatever key sorts last, as
  long as it starts with ``async/`` and has ``trainer/global_step``.
- ``json-lines``: one JSON object per line with a step key.

The formats without a kind have no eval/train split: an eval block printed for a step merges
into that step's row as ``eval/...`` columns (same-step blocks merge as wandb.log does).

A file's serialization is the first present in that order; blocks of the others in the same
file are ignored (a run that mirrors W&B and also logs to the console would otherwise count
every step twice). ANSI colours, Ray actor prefixes and Iris ``job logs`` prefixes are
stripped per line; a multi-line dict only takes lines from the process that printed its
header, so another actor's lines interleaved by Ray do not corrupt it.

Chain order is the caller's order, never file-name order. When a later attempt logs step S,
every row of earlier attempts at steps >= S is superseded (that branch died; surviving
checkpoints descend from the later attempt) and kept in ``superseded.csv``.

In the pipeline (``metric_surface_step``) an attempt whose log is readable but holds no parsable
metric line (0 bytes, only a traceback: a bad node; or only a line a kill cut) is a dead attempt: it
adds no rows, replaces nothing, and is named in ``attempts.json`` and ``report.md``. Any prefix of a
log is a log: a metric line or block that cannot be parsed (cut at any byte, NUL tail, garbled) is
skipped and counted per attempt and kind with its file and line (``attempts.json`` ``skipped_lines``),
never guessed. Only a log missing from logs.tar or unreadable, or a chain in which no attempt has one
parsable metric line, stops the step. Per-trial rows come from the trace tarball in their own step
(``trial_table_step``), so selection never waits on the traces.

One module per job: common (serializations, limits, errors), lines (line cleaning, values),
parse (one log: the scanner), surface (the chain's rows), trials (result.json rows), report
(the output files), step (the pipeline steps) and cli. The public names are re-exported here.
"""
from __future__ import annotations

from rlkeep.metrics.common import (
    CHUNK_BYTES,
    DEFAULT_EMA_ALPHA,
    DEFAULT_REWARD_METRIC,
    MAX_BLOCK_CHARS,
    MAX_BLOCK_LINES,
    MetricsError,
    NoMetricsError,
    ROW_META,
    SERIALIZATIONS,
    STEP_KEYS,
    SkippedLine,
)
from rlkeep.metrics.lines import (
    clean_line,
    coerce_value,
    parse_python_dict,
)
from rlkeep.metrics.parse import (
    ParsedLog,
    detect_serialization,
    parse_log,
    parse_log_file,
    parse_log_stream,
)
from rlkeep.metrics.surface import (
    AttemptWithoutMetrics,
    Surface,
    build_surface,
    chain_surface,
    ema_series,
    metric_columns,
    numeric_series,
    read_attempt,
    read_metrics_csv,
    surface_from_parsed,
)
from rlkeep.metrics.trials import (
    TRIAL_COLUMNS,
    iter_result_files,
    span_seconds,
    trial_from_result,
    trials_from_results,
)
from rlkeep.metrics.report import (
    OUTPUT_FILES,
    SURFACE_FILES,
    TRIAL_FILES,
    attempts_json,
    eval_csv,
    key_metrics,
    metrics_csv,
    render_surface,
    render_trials,
    report_markdown,
    reward_metric,
    reward_png,
    skipped_lines_markdown,
    superseded_csv,
    trial_markdown,
    trials_csv,
    trials_markdown,
    without_metrics_markdown,
    write_all,
    write_outputs,
)
from rlkeep.metrics.step import (
    IN_MEMORY_RESULT_BYTES,
    TAR_READ_BYTES,
    metric_surface_step,
    trial_table_step,
)
from rlkeep.metrics.cli import (
    cli_main,
)

__all__ = [
    "AttemptWithoutMetrics",
    "CHUNK_BYTES",
    "DEFAULT_EMA_ALPHA",
    "DEFAULT_REWARD_METRIC",
    "IN_MEMORY_RESULT_BYTES",
    "MAX_BLOCK_CHARS",
    "MAX_BLOCK_LINES",
    "MetricsError",
    "NoMetricsError",
    "OUTPUT_FILES",
    "ParsedLog",
    "ROW_META",
    "SERIALIZATIONS",
    "STEP_KEYS",
    "SkippedLine",
    "SURFACE_FILES",
    "Surface",
    "TAR_READ_BYTES",
    "TRIAL_COLUMNS",
    "TRIAL_FILES",
    "attempts_json",
    "build_surface",
    "chain_surface",
    "clean_line",
    "cli_main",
    "coerce_value",
    "detect_serialization",
    "ema_series",
    "eval_csv",
    "iter_result_files",
    "key_metrics",
    "metric_columns",
    "metric_surface_step",
    "metrics_csv",
    "numeric_series",
    "parse_log",
    "parse_log_file",
    "parse_log_stream",
    "parse_python_dict",
    "read_attempt",
    "read_metrics_csv",
    "render_surface",
    "render_trials",
    "skipped_lines_markdown",
    "report_markdown",
    "reward_metric",
    "reward_png",
    "span_seconds",
    "superseded_csv",
    "surface_from_parsed",
    "trial_from_result",
    "trial_markdown",
    "trial_table_step",
    "trials_csv",
    "trials_from_results",
    "trials_markdown",
    "without_metrics_markdown",
    "write_all",
    "write_outputs",
]
