"""Saved checkpoints of a run, which of them are complete, and the choice by the declared rule.

The parts, one job each: `listing` (every saved step in a store listing, complete or not, with
reasons), `selection` (the record's checkpoint.rule over the complete ones), `step` (the
`list_checkpoints` and `select_checkpoint` pipeline steps). The names below are the package's
public surface (`from rlkeep.checkpoints import ...`).
"""
from rlkeep.checkpoints.listing import (
    LATEST_TXT,
    MAX_LISTED,
    SOURCE_ORDER,
    Candidate,
    CheckpointError,
    as_candidate,
    candidates_from_listing,
    keys_to_read,
    parse_latest_step,
    valid_candidates,
)
from rlkeep.checkpoints.selection import RULE_EXAMPLE, RULE_KINDS, select_checkpoint
from rlkeep.checkpoints.step import MAX_SMALL_FILE, list_checkpoints_step, select_checkpoint_step

__all__ = [
    "LATEST_TXT", "MAX_LISTED", "MAX_SMALL_FILE", "RULE_EXAMPLE", "RULE_KINDS", "SOURCE_ORDER", "Candidate",
    "CheckpointError", "as_candidate", "candidates_from_listing", "keys_to_read", "list_checkpoints_step",
    "parse_latest_step", "select_checkpoint", "select_checkpoint_step", "valid_candidates",
]
