"""The coverage gate: the share of result.json trials the export accounted for, and the refusal
(`CoverageError`, carrying the rejected manifest) when it is under the threshold."""
from __future__ import annotations

from fractions import Fraction
from typing import Any

from rlkeep.errors import RlkeepError

DEFAULT_MIN_COVERAGE = 0.95


class CoverageError(RlkeepError):
    """Result coverage is under the gate; `manifest` holds the rejected build's manifest."""

    def __init__(self, message: str, manifest: dict[str, Any]):
        super().__init__(message)
        self.manifest = manifest


def coverage_message(covered: int, result_count: int, min_coverage: float) -> str:
    ratio = covered / max(1, result_count) if result_count else 1.0
    return (f"result coverage below threshold: {covered}/{result_count} = {ratio * 100:.2f}%; "
            f"required >= {min_coverage * 100:.2f}%")


def below_gate(covered: int, result_count: int, min_coverage: float) -> bool:
    if result_count == 0:
        return False
    return Fraction(covered, result_count) < Fraction(str(min_coverage))
