"""The surface: rows of a chain of attempts merged in chain order, superseded rows kept apart."""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlkeep.metrics.common import MetricsError, NoMetricsError, ROW_META, SkippedLine
from rlkeep.metrics.lines import coerce_value
from rlkeep.metrics.parse import ParsedLog, parse_log, parse_log_stream


# --------------------------------------------------------------------------- the surface

@dataclass(frozen=True)
class AttemptWithoutMetrics:
    """An attempt whose readable log holds no metric block: preserved, named, no rows."""

    attempt: str
    source: str
    reason: str  # empty | no_metric_blocks (NoMetricsError.reason)
    state: str | None = None  # the scheduler's state in chain.json, as the logs manifest recorded it
    bytes: int | None = None
    lines: int | None = None
    skipped: tuple[SkippedLine, ...] = ()  # reason no_parsable_metric_line: the lines that were cut

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "reason": self.reason, "state": self.state, "bytes": self.bytes,
                "lines": self.lines, "source": self.source, "skipped_lines": len(self.skipped)}


@dataclass
class Surface:
    """rows: one per global step (sorted), keys global_step, attempt, source, line + metrics.
    superseded: rows replaced by a later attempt or a later block, with superseded_by/reason.
    files: per log, in chain order: source, attempt, serialization, steps, ignored_blocks, skipped."""

    rows: list[dict[str, Any]]
    superseded: list[dict[str, Any]]
    files: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    without_metrics: list[AttemptWithoutMetrics] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)  # every attempt, in chain order (with and without metrics)

    def metric_names(self) -> list[str]:
        return metric_columns(self.rows)

    def steps(self) -> list[int]:
        return [row["global_step"] for row in self.rows]

    def skipped_lines(self) -> list[dict[str, Any]]:
        """Every unparsable metric line of the chain, in chain order then line order."""
        by_attempt = {info["attempt"]: [s.to_json(info["attempt"], info["source"]) for s in info["skipped"]]
                      for info in self.files}
        by_attempt.update({d.attempt: [s.to_json(d.attempt, d.source) for s in d.skipped]
                           for d in self.without_metrics})
        order = self.chain or list(by_attempt)
        return [entry for attempt in order for entry in by_attempt.get(attempt, [])]


def metric_columns(rows: Iterable[Mapping[str, Any]], exclude: Sequence[str] = ROW_META) -> list[str]:
    names: set[str] = set()
    for row in rows:
        names.update(row)
    return sorted(names.difference(exclude))


def _merge_attempt_rows(attempt: str, source: str, rows: Sequence[dict[str, Any]],
                        kind: str) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """One attempt's rows by step. Blocks logged twice for a step merge like wandb.log(step=N)
    does; a block whose values a later block overwrote is kept as superseded."""
    merged: dict[int, dict[str, Any]] = {}
    superseded: list[dict[str, Any]] = []
    for row in rows:
        step = row["global_step"]
        full = {**row, "attempt": attempt, "source": source}
        earlier = merged.get(step)
        if earlier is None:
            merged[step] = full
            continue
        conflicts = [key for key, value in row.items() if key not in ("line", "global_step")
                     and key in earlier and not _same_value(earlier[key], value)]
        if conflicts:
            superseded.append({**earlier, "kind": kind, "superseded_by": attempt,
                               "reason": f"step logged again at line {row['line']} of the same log"})
        merged[step] = {**earlier, **full}
    return merged, superseded


def _same_value(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    return left == right


def _chain_rows(per_attempt: Sequence[tuple[str, str, list[dict[str, Any]]]], kind: str
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    current: dict[int, dict[str, Any]] = {}
    superseded: list[dict[str, Any]] = []
    for attempt, source, rows in per_attempt:
        merged, within = _merge_attempt_rows(attempt, source, rows, kind)
        superseded.extend(within)
        if not merged:
            continue
        resume = min(merged)
        for step in sorted(step for step in current if step >= resume):
            old = current.pop(step)
            reason = (f"re-logged by later attempt {attempt}" if step in merged
                      else f"after the resume point (step {resume}) of later attempt {attempt}")
            superseded.append({**old, "kind": kind, "superseded_by": attempt, "reason": reason})
        current.update(merged)
    return [current[step] for step in sorted(current)], superseded


def surface_from_parsed(logs: Sequence[tuple[str, ParsedLog]],
                        without_metrics: Sequence[AttemptWithoutMetrics] = (),
                        chain: Sequence[str] | None = None) -> Surface:
    """Build the surface from (attempt_slug, parsed log) pairs in chain order.

    without_metrics: the chain's dead attempts (no rows, no supersession); chain: every
    attempt in order, for the report (default: the attempts with metrics, then the others).
    """
    seen: dict[str, str] = {}
    for attempt, source in [*((a, p.source) for a, p in logs), *((d.attempt, d.source) for d in without_metrics)]:
        if attempt in seen:
            raise MetricsError(f"attempt {attempt!r} appears twice in the chain ({seen[attempt]} and {source})")
        seen[attempt] = source
    if not logs and without_metrics:
        dead = ", ".join(f"{d.attempt} ({d.reason})" for d in without_metrics)
        raise MetricsError(f"no attempt of the chain logged metrics: {dead}; the surface is empty, so there is "
                           "nothing to select a checkpoint from (the logs are preserved in logs.tar)")
    rows, superseded = _chain_rows([(a, p.source, p.rows) for a, p in logs], "train")
    eval_rows, eval_superseded = _chain_rows([(a, p.source, p.eval_rows) for a, p in logs], "eval")
    files = [{
        "source": parsed.source,
        "attempt": attempt,
        "serialization": parsed.serialization,
        "steps": parsed.steps,
        "eval_rows": len(parsed.eval_rows),
        "ignored_blocks": parsed.ignored_blocks,
        "skipped": parsed.skipped,
    } for attempt, parsed in logs]
    order = list(chain) if chain is not None else [*(a for a, _ in logs), *(d.attempt for d in without_metrics)]
    return Surface(rows=rows, superseded=superseded + eval_superseded, files=files, eval_rows=eval_rows,
                   without_metrics=list(without_metrics), chain=order)


def read_attempt(attempt: str, chunks: Iterable[bytes], source: str, *, state: str | None = None,
                 size: int | None = None, lines: int | None = None) -> ParsedLog | AttemptWithoutMetrics:
    """One attempt's log as the chain sees it: its parsed rows, or, when it holds no parsable
    metric line (empty, a traceback, only a line a kill cut), an attempt without metrics."""
    try:
        return parse_log_stream(chunks, source)
    except NoMetricsError as error:
        return AttemptWithoutMetrics(attempt=attempt, source=source, reason=error.reason, state=state,
                                     bytes=size, lines=lines, skipped=error.skipped)


def chain_surface(logs: Sequence[tuple[str, str, bytes]]) -> Surface:
    """(attempt, source, log bytes) in chain order -> the surface the pipeline builds from them."""
    parsed: list[tuple[str, ParsedLog]] = []
    dead: list[AttemptWithoutMetrics] = []
    for attempt, source, data in logs:
        outcome = read_attempt(attempt, [data], source, size=len(data))
        if isinstance(outcome, AttemptWithoutMetrics):
            dead.append(outcome)
        else:
            parsed.append((attempt, outcome))
    return surface_from_parsed(parsed, dead, chain=[attempt for attempt, _, _ in logs])


def build_surface(logs: Sequence[tuple[str, str, str]]) -> Surface:
    """(attempt_slug, source_name, text) in chain order -> the metric surface."""
    return surface_from_parsed([(attempt, parse_log(text, source)) for attempt, source, text in logs])


def ema_series(values: Sequence[float], alpha: float) -> list[float]:
    """EMA_1 = r_1, EMA_n = alpha*r_n + (1-alpha)*EMA_{n-1}."""
    out: list[float] = []
    for value in values:
        out.append(value if not out else alpha * value + (1 - alpha) * out[-1])
    return out


def _row_step(row: Mapping[str, Any]) -> int:
    step = coerce_value(row.get("global_step"))
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        where = f" ({row['source']}:{row['line']})" if "source" in row and "line" in row else ""
        raise MetricsError(f"surface row has no integer global_step ({row.get('global_step')!r}){where}")
    return step


def numeric_series(rows: Sequence[Mapping[str, Any]], metric: str) -> list[tuple[int, float]]:
    """(step, value) for every row holding a finite number for metric, in step order.

    Raises MetricsError when the metric is absent everywhere or a value is not a number
    (naming the step, file and line). NaN values are skipped: W&B logs them for a step where
    the batch had no finished trajectory, and they carry no ranking information.
    """
    points: list[tuple[int, float]] = []
    present = False
    for step, row in sorted(((_row_step(row), row) for row in rows), key=lambda pair: pair[0]):
        if metric not in row or row[metric] is None or row[metric] == "":
            continue
        present = True
        value = coerce_value(row[metric])
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            where = f" ({row['source']}:{row['line']})" if "source" in row and "line" in row else ""
            raise MetricsError(f"metric {metric!r} has a non-numeric value {row[metric]!r} at step {step}{where}")
        if math.isfinite(value):
            points.append((step, float(value)))
    if not present:
        names = sorted({key for row in rows for key in row if key not in ROW_META})
        hint = [name for name in names if name.startswith("reward/")] or names[:10]
        raise MetricsError(f"metric {metric!r} is absent from the metric surface; available: {', '.join(hint) or 'none'}")
    return points


def read_metrics_csv(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Surface rows back from a metrics.csv: numbers coerced, empty cells dropped, and
    source/line set to the CSV file and line so later errors point into it."""
    rows: list[dict[str, Any]] = []
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as error:
        raise MetricsError(f"{path}: cannot read metrics.csv ({error.strerror})") from error
    with handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or reader.fieldnames[:2] != ["global_step", "attempt"]:
            raise MetricsError(f"{path}: not a metrics.csv (header must start with global_step,attempt)")
        for line, record in enumerate(reader, start=2):
            row: dict[str, Any] = {"source": str(path), "line": line, "attempt": record["attempt"]}
            row.update({key: coerce_value(value) for key, value in record.items()
                        if key not in ("attempt",) and value not in ("", None)})
            row["global_step"] = _row_step(row)
            rows.append(row)
    return rows
