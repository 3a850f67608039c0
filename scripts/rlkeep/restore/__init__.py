"""Restore a run's archive from its destination, and rehearse that restore before reclaiming.

The parts, one job each: `source` (where the archive is, from verify/archive.json or a URL, and
a streamed reader of it: s3://, file://, hf://datasets), `extract` (member by member into a
target, each checked against the MANIFEST), `targets` (a local folder or a store prefix, never
replacing what exists unless asked), `run` (one restore, start to end), `rehearsal` (the
comparisons with what the archive was built from), `step` (the `rehearse_restore` and `restore`
pipeline steps) and `cli` (`rlkeep restore`).
"""
from rlkeep.restore.cli import cli_main
from rlkeep.restore.run import Restored, read_manifest, restore_archive
from rlkeep.restore.source import ArchiveLocation, location_from_job_dir, location_from_url
from rlkeep.restore.targets import LocalTarget, StoreTarget

__all__ = [
    "ArchiveLocation", "LocalTarget", "Restored", "StoreTarget", "cli_main", "location_from_job_dir",
    "location_from_url", "read_manifest", "restore_archive",
]
