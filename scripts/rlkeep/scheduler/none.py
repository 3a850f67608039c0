"""`scheduler: none`: no scheduler to ask. The chain's attempts are recorded with unknown states,
nothing is ever stopped, and the trainer logs come from the store (rlkeep.sync)."""
from __future__ import annotations

from typing import Any

from rlkeep.context import StepContext, not_applicable
from rlkeep.scheduler.interface import Scheduler, StopJournal


class NoScheduler(Scheduler):
    """`scheduler: none`: no scheduler to ask; the logs come from the store."""

    name = "none"


    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"slug": job_id.rsplit("/", 1)[-1], "id": job_id, "state": "unknown", "summary_format": "none"}
                for job_id in self.record.chain], {}

    def stop_retries(self, chain: dict[str, Any], journal: StopJournal) -> dict[str, Any]:
        return not_applicable("scheduler none: nothing to cancel", stopped=[])
