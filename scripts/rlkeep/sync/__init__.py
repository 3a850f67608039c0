"""Sync: every attempt's logs and the full durable trace tree into tars (the face: its names are
rlkeep.sync.sources'; the steps are rlkeep.sync.step's, the tar stream rlkeep.tarstream's)."""
from __future__ import annotations

from rlkeep.sync.sources import (CACHE_PARTS, CORE_DUMP_PATTERNS, Exclusion, WEIGHT_PATTERNS, chain_attempts,
                                 check_run_space, enforce_skip_policy, is_weight_or_dump, line_count,
                                 parse_exclusions, trainer_logs, trial_counts)

__all__ = [
    "CACHE_PARTS", "CORE_DUMP_PATTERNS", "Exclusion", "WEIGHT_PATTERNS", "chain_attempts", "check_run_space",
    "enforce_skip_policy", "is_weight_or_dump", "line_count", "parse_exclusions", "trainer_logs",
    "trial_counts",
]
