"""The restore pipeline steps: `rehearse_restore` (before reclaim: restore the archive from where
verify_archive verified it into scratch and compare it with what it was built from) and `restore`
(the on-demand target `<job>/restore/DONE`: the run's informative tree in `<job>/restore/tree/`).
"""
from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rlkeep.archive.manifest import ManifestEntry, iter_manifest_entries
from rlkeep.context import StepContext
from rlkeep.pipeline import ARCHIVED_JOB_FILES
from rlkeep.diskspace import TAR_OVERHEAD_PER_MEMBER, require_free
from rlkeep.errors import RlkeepError
from rlkeep.jsonio import write_json
from rlkeep.restore.rehearsal import (
    differing_job_files,
    is_result_member,
    metric_surface_problems,
    trial_rows_problems,
    unaccounted_sync_members,
)
from rlkeep.restore.run import restore_archive
from rlkeep.restore.source import location_from_job_dir
from rlkeep.restore.targets import ComparingTarget, LocalTarget

log = logging.getLogger("rlkeep.restore")


def _manifest_entries(ctx: StepContext) -> dict[str, ManifestEntry]:
    return {e.member: e for e in iter_manifest_entries(ctx.inputs["manifest"])}


def _fresh_folder(ctx: StepContext, name: str, entries: dict[str, ManifestEntry],
                  keep: Callable[[str], bool] = lambda member: True) -> Path:
    """An empty folder for a restored tree, with room for the MANIFEST's kept bytes it will hold."""
    folder = ctx.job_dir / name
    shutil.rmtree(folder, ignore_errors=True)
    kept = [e for e in entries.values() if e.reason is None and keep(e.member)]
    require_free(folder, sum(e.size + TAR_OVERHEAD_PER_MEMBER for e in kept), name)
    folder.mkdir(parents=True)
    return folder


def compared_member(member: str) -> bool:
    """The archive members the rehearsal writes to scratch: the trainer logs, which the metric surface
    reads as files. The trials' result.json are read as they stream past; the job files are compared
    by their MANIFEST digest; every other member is checked by its digest alone."""
    parts = member.split("/")
    return parts[:2] == ["logs", "attempts"] and parts[-1] == "trainer.log"


def written_member(entries: dict[str, ManifestEntry]) -> Callable[[str], bool]:
    """compared_member, and the job files too where the MANIFEST has no digest to compare them by
    (one written before the column)."""
    undigested = {member for member, entry in entries.items() if member.startswith("rlkeep/") and entry.sha256 is None}
    return lambda member: compared_member(member) or member in undigested


def rehearse_restore_step(ctx: StepContext) -> None:
    """`<job>/verify/restore.json`: the archive, read again from its destination (streamed, never
    stored whole), restores with every member held to the MANIFEST's size and digest as it streams,
    and agrees with its sources (rlkeep.restore.rehearsal). Only the trainer logs, which the metric
    surface reads as files, are written to scratch: the rehearsal never holds a second copy of the
    trace tree or of the job files. Reclamation waits on this sentinel; any disagreement fails the
    step naming the file."""
    from rlkeep.metrics.trials import trial_from_result

    started = time.monotonic()
    spec = ctx.record.spec
    entries = _manifest_entries(ctx)
    written = written_member(entries)
    tree = _fresh_folder(ctx, ".work/rehearse_restore/tree", entries, written)
    rows: list[dict] = []
    results = (lambda member: is_result_member(member, spec.archive_tree)) if spec.archive_tree else (lambda member: False)
    target = ComparingTarget(tree, written, reads=results,
                             read=lambda member, data: rows.append(trial_from_result(member.split("/")[1], data)))
    try:
        restored = restore_archive(location_from_job_dir(ctx.job_dir, ctx.job), target)
        problems = list(restored.problems)
        if restored.manifest_bytes != ctx.inputs["manifest"].read_bytes():
            problems.append(f"the MANIFEST at {restored.manifest_source} differs from {ctx.inputs['manifest']}")
        sources = [("logs", ctx.inputs["logs"])]
        if spec.archive_tree is not None:
            sources.append((spec.archive_tree, ctx.inputs["traces"]))
        problems += unaccounted_sync_members(sources, entries)
        problems += differing_job_files(tree, entries, [(f"rlkeep/{name}", ctx.inputs[key])
                                               for name, key in ARCHIVED_JOB_FILES if key in ctx.inputs])
        tools = []
        if "metrics" in ctx.inputs:
            problems += metric_surface_problems(tree, ctx.record.attempts, ctx.inputs["metrics"])
            tools.append("metric surface = metrics/metrics.csv")
        if "trials" in ctx.inputs and spec.archive_tree is not None:
            problems += trial_rows_problems(rows, ctx.inputs["trials"])
            tools.append("trial table = metrics/trials.csv")
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    if problems:
        raise RlkeepError(f"restore rehearsal of {restored.location.describe()} failed, so reclamation waits: "
                          + "; ".join(problems) + ". Rebuild and upload the archive (--forcerun archive), then rerun")
    evidence = restored.evidence()
    write_json(ctx.outputs["verify"], {
        **evidence, "status": "completed", "kind": spec.name, "tools_agree": tools,
        "sync_members_accounted": [tree_name for tree_name, _ in sources],
        "job_files_equal": [f"rlkeep/{name}" for name, key in ARCHIVED_JOB_FILES if key in ctx.inputs],
        "seconds": round(time.monotonic() - started, 3), "scratch": "removed after the comparison"})
    log.info("restore rehearsal: %d files (%d bytes) restored from %s and compared in %.1f s",
             evidence["restored_files"], evidence["restored_bytes"], evidence["archive"], time.monotonic() - started)


def restore_step(ctx: StepContext) -> None:
    """`<job>/restore/DONE`: the archive restored into `<job>/restore/tree/` (replaced on each run),
    every file checked against the MANIFEST. A missing or corrupt member fails the step naming it;
    what could be restored stays in the tree."""
    tree = _fresh_folder(ctx, "restore/tree", _manifest_entries(ctx))
    restored = restore_archive(location_from_job_dir(ctx.job_dir, ctx.job), LocalTarget(tree))
    if restored.problems:
        raise RlkeepError(restored.message())
    write_json(ctx.outputs["done"], restored.evidence())
