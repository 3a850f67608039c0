"""Batch errors from the trainer's stdout: SkyRL's Harbor generator reports each generation batch as
structured lines (docs/reference.md, formats §2, as the operator tool
`parse_skyrl_metrics.py` reads them):

    Exception breakdown: {'AgentTimeoutError': 2, 'NonZeroAgentExitCodeError': 1}
    Batch generation complete: 61/64 successful, 3 failed instances, 2 masked

The breakdown (a Python dict literal) is printed only when a batch had exceptions, just before its
`Batch generation complete` line. Which step a batch belongs to: a step's batches are generated
before the trainer logs that step's metrics, so a batch counts toward the next step whose metrics
follow it (`Step N:` of the console logger, or `WANDB_MIRROR kind=train step=N`). Batches after the
last logged step (an attempt that died mid-step) are kept under step None. The operator tool counts
them toward the step logged before instead; the totals are the same either way.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Counts are bounded to 18 digits so a garbled line never reaches int()'s digit limit.
BATCH = re.compile(r"Batch generation complete: (?P<ok>\d{1,18})/(?P<total>\d{1,18}) successful, "
                   r"(?P<failed>\d{1,18}) failed instances, (?P<masked>\d{1,18}) masked")
BREAKDOWN = re.compile(r"Exception breakdown: (?P<dict>.*?)\s*$")
STEP_MARKER = re.compile(r"(?:\bStep (?P<console>\d{1,18}):|WANDB_MIRROR\s+kind=train\s+step=(?P<mirror>\d{1,18})\b)")
COUNTS = ("batches", "instances", "successful", "failed", "masked")


@dataclass
class StepErrors:
    attempt: str
    step: int | None  # the step whose metrics followed these batches; None after the last one
    batches: int = 0
    instances: int = 0
    successful: int = 0
    failed: int = 0
    masked: int = 0
    exceptions: dict[str, int] = field(default_factory=dict)
    source: str = ""  # the log file the batch lines came from


@dataclass
class BatchErrors:
    steps: list[StepErrors] = field(default_factory=list)
    unreadable_breakdowns: int = 0  # `Exception breakdown:` lines whose dict did not parse


def _breakdown(text: str) -> dict[str, int] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in value.items()):
        return None
    return value


def scan_lines(lines: Iterable[str], attempt: str, errors: BatchErrors | None = None,
               source: str = "") -> BatchErrors:
    """Add the batches of one of an attempt's log files (source) to errors (a new one when None),
    grouped by the step they fed (None in a file without step markers)."""
    errors = errors if errors is not None else BatchErrors()
    pending = StepErrors(attempt, None, source=source)
    for raw in lines:
        if "Batch generation" not in raw and "Exception breakdown" not in raw and "Step " not in raw \
                and "WANDB_MIRROR" not in raw:
            continue
        line = ANSI.sub("", raw)
        batch = BATCH.search(line)
        if batch:
            pending.batches += 1
            pending.instances += int(batch["total"])
            pending.successful += int(batch["ok"])
            pending.failed += int(batch["failed"])
            pending.masked += int(batch["masked"])
            continue
        breakdown = BREAKDOWN.search(line)
        if breakdown:
            parsed = _breakdown(breakdown["dict"])
            if parsed is None:
                errors.unreadable_breakdowns += 1
            for name, count in (parsed or {}).items():
                pending.exceptions[name] = pending.exceptions.get(name, 0) + count
            continue
        marker = STEP_MARKER.search(line)
        if marker and (pending.batches or pending.exceptions):
            pending.step = int(marker["console"] or marker["mirror"])
            errors.steps.append(pending)
            pending = StepErrors(attempt, None, source=source)
    if pending.batches or pending.exceptions:
        errors.steps.append(pending)
    return errors


def exception_types(errors: BatchErrors) -> list[str]:
    return sorted({name for step in errors.steps for name in step.exceptions})


def rows(errors: BatchErrors) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, one row per attempt and step): the batch counts and one column per exception type."""
    names = exception_types(errors)
    columns = ["attempt", "step", "source", *COUNTS, *names]
    table = []
    for step in errors.steps:
        row: dict[str, Any] = {"attempt": step.attempt, "step": step.step, "source": step.source}
        row.update({name: getattr(step, name) for name in COUNTS})
        row.update({name: step.exceptions.get(name, 0) for name in names})
        table.append(row)
    return columns, table


def totals(table: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, int]:
    """Each count and exception column summed over every row."""
    return {name: sum(int(row.get(name) or 0) for row in table) for name in columns
            if name not in ("attempt", "step", "source")}
