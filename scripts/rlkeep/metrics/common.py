"""The serializations, step keys, limits and errors shared by every part of the metric surface."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkeep.errors import RlkeepError


SERIALIZATIONS: tuple[str, ...] = ("wandb-json", "skyrl-console", "python-dict", "json-lines")
STEP_KEYS: tuple[str, ...] = ("trainer/global_step", "global_step", "step", "_step")
ROW_META: tuple[str, ...] = ("global_step", "attempt", "source", "line")
DEFAULT_REWARD_METRIC = "reward/avg_raw_reward"
DEFAULT_EMA_ALPHA = 1 / 3

CHUNK_BYTES = 4 << 20
# A metric dict longer than this (or one whose closing brace never comes) is a truncated block.
MAX_BLOCK_CHARS = 8 << 20
MAX_BLOCK_LINES = 50_000
# Skipped lines named one by one in attempts.json, DONE and the reports (all are counted).
MAX_SKIPPED_NAMED = 50


@dataclass(frozen=True)
class SkippedLine:
    """A metric line or block that could not be parsed (cut by a kill, garbled): counted, never guessed."""

    line: int
    kind: str  # the serialization it was read as (SERIALIZATIONS)
    reason: str

    def to_json(self, attempt: str, source: str) -> dict[str, Any]:
        return {"attempt": attempt, "source": source, "line": self.line, "kind": self.kind, "reason": self.reason}


class MetricsError(RlkeepError):
    """A trainer log, a result.json or a metric cannot be read as the surface needs it."""


class NoMetricsError(MetricsError):
    """A readable log that holds no usable metric block (reason `empty`, `no_metric_blocks`, or
    `no_parsable_metric_line`: every metric line it has was skipped, e.g. the one line a kill cut).

    In a chain this is a dead attempt (a bad node: a traceback, or a pod that never wrote a
    line): data for the record, not an error. Alone (the CLI, one log) it is still an error.
    """

    def __init__(self, message: str, reason: str, skipped: tuple[SkippedLine, ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason
        self.skipped = skipped
