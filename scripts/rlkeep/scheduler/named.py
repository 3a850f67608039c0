"""Every scheduler a record may name (`scheduler:` in the record schema), by that name, and
scheduler_for(record). A new scheduler is one more Scheduler subclass in SCHEDULERS."""
from __future__ import annotations

from rlkeep.records import JobRecord
from rlkeep.scheduler.interface import Scheduler
from rlkeep.scheduler.iris import IrisScheduler
from rlkeep.scheduler.none import NoScheduler
from rlkeep.scheduler.slurm import SlurmScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {cls.name: cls for cls in (IrisScheduler, SlurmScheduler, NoScheduler)}


def scheduler_for(record: JobRecord) -> Scheduler:
    """The record's scheduler (records.py validated the name)."""
    return SCHEDULERS[record.scheduler](record)
