"""Reclaim a run's source storage (the face: the decision, the plan and the journaled deletion are
rlkeep.reclaim.deletion's, the step rlkeep.reclaim.step's)."""
from __future__ import annotations

from rlkeep.reclaim.deletion import (AUTHORITY_HINT, DEFAULT_BATCH, LOGS_ARCHIVE_PREFIX, PRESENT_STATUSES,
                                     archive_member, awaits_authority, current_sizes, execute_reclaim, plan_id,
                                     plan_reclaim, preservation, reclaim_decision)

__all__ = [
    "AUTHORITY_HINT", "DEFAULT_BATCH", "LOGS_ARCHIVE_PREFIX", "PRESENT_STATUSES", "archive_member",
    "awaits_authority", "current_sizes", "execute_reclaim", "plan_id", "plan_reclaim", "preservation",
    "reclaim_decision",
]
