"""The archive's pipeline steps: `archive` (redact the synced trees, build the tgz and MANIFEST)
and `verify_archive` (hold the tarball to its MANIFEST, upload and verify the remote copy).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlkeep.archive.build import build_archive
from rlkeep.archive.manifest import DEFAULT_LARGE_THRESHOLD, summary_from_chain
from rlkeep.archive.upload import upload_and_verify
from rlkeep.archive.verify import verify_archive
from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.jsonio import read_json, write_json
from rlkeep.pipeline import ARCHIVED_JOB_FILES
from rlkeep.regions import check_transfer, store_to_archive

log = logging.getLogger("rlkeep.archive")



def archive_step(ctx: StepContext) -> None:
    """`<job>/archive/<job>_archive.tgz` + `MANIFEST`: everything informative, never weights or dumps.

    The trees follow the run's kind (rlkeep.kinds): `logs/` always, plus the trace tree as
    `trace_jobs/` (rl, datagen) or `eval_jobs/` (eval); sft has none. Independent of the metric
    surface on purpose: a malformed trainer log must not block the archive (the logs and the
    run's own metric CSVs are inside logs.tar either way).
    """

    spec = ctx.record.spec
    chain = read_json(ctx.inputs["chain"])
    extra = [(name, ctx.inputs[key]) for name, key in ARCHIVED_JOB_FILES if key in ctx.inputs]
    extra.append((f"records/{ctx.record.path.name}", ctx.record.path))
    trees = [("logs", "logs")]
    if spec.archive_tree is not None:
        if "traces" not in ctx.inputs:
            raise RlkeepError(f"archive of a {spec.name} run needs the synced trace tree (sync/trace_jobs.tar)")
        trees.append((spec.archive_tree, "traces"))
    # The archive may leave this machine (archive.dest): its text passes the same redaction as
    # every other destination, inside compressed logs, tars and zips too; a member that cannot be
    # opened or rewritten (encrypted zip, bomb) stops the step; other binary members are copied.

    evidence = archive_sync_tars(
        ctx.outputs["tgz"], ctx.outputs["manifest"],
        trees=[(name, ctx.inputs[key]) for name, key in trees],
        extra_files=extra,
        summary=summary_from_chain(ctx.record, chain),
        large_threshold=int(ctx.settings.get("large_terminal_bytes", DEFAULT_LARGE_THRESHOLD)),
        work=ctx.work_dir("archive"),
    )
    log.info("archive: %s kept files (%s bytes), %s skipped", evidence.get("kept_files"), evidence.get("kept_bytes"),
             evidence.get("skipped_files"))


def archive_sync_tars(out_tgz: Path, manifest: Path, *, trees: list[tuple[str, Path]],
                      extra_files: list[tuple[str, Path]], summary: dict[str, Any], large_threshold: int,
                      work: Path) -> dict[str, Any]:
    """The archive of (tree, sync tar) pairs and the job's files, every tree's members scanned in
    the archive's digest pass and redacted as they stream into it (one member at a time in
    `work`); returns build_archive's evidence."""
    # numpy and the redaction rules cost about 0.2 s to import: verify_archive and reclaim, which
    # import this package, do not redact and do not pay for them
    from rlkeep.redaction import redactor_from_environment
    from rlkeep.redaction.walk import TarRedaction

    redactor = redactor_from_environment()
    rewriters = {name: TarRedaction(tar, redactor, work_dir=work / "scratch") for name, tar in trees}
    evidence = build_archive(out_tgz, manifest, sources=list(trees), extra_files=extra_files, summary=summary,
                             large_threshold=large_threshold, rewriters=rewriters)
    for name, rewriter in rewriters.items():
        report = rewriter.report()
        log.info("archive: %s: %d members redacted (%d findings, inside containers too; %d bytes read through a "
                 "decompressor), %d binary members copied as they are",
                 name, report["members_redacted"], len(report["findings"]), report["bytes_decompressed"],
                 report["binary_members"])
    return evidence


def verify_archive_step(ctx: StepContext) -> None:
    """`<job>/verify/archive.json`: the tarball lists the kind's expected trees; the remote copy matches."""

    spec = ctx.record.spec
    local = verify_archive(ctx.inputs["tgz"], ctx.inputs["manifest"], expected_trees=list(spec.expected_archive_trees))
    dest = ctx.settings.get("dest")
    remote = None
    transfer: dict[str, Any] | str = "not_applicable: the record names no archive.dest"
    if dest:
        # The archive is the run's data: it leaves the store's region when archive.dest is elsewhere.
        transfer = check_transfer(ctx, nbytes=ctx.inputs["tgz"].stat().st_size, what=f"archive upload to {dest}",
                                  **store_to_archive(ctx.record))
        remote = upload_and_verify(ctx.inputs["tgz"], ctx.inputs["manifest"], dest, ctx.job)
    write_json(ctx.outputs["verify"], {"status": "completed", "kind": spec.name, "local": local, "dest": dest,
                                       "transfer": transfer,
                                       "remote": remote if remote else "not_applicable: the record names no archive.dest"})
