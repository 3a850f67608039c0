"""The pipeline steps: the metric surface from logs.tar, the trial table from the trace tarball."""
from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from rlkeep.context import StepContext
from rlkeep.metrics.common import MAX_SKIPPED_NAMED, MetricsError
from rlkeep.metrics.parse import ParsedLog
from rlkeep.metrics.report import SURFACE_FILES, TRIAL_FILES, write_all, render_surface, render_trials
from rlkeep.metrics.surface import AttemptWithoutMetrics, read_attempt, surface_from_parsed
from rlkeep.metrics.trials import trials_from_results


# --------------------------------------------------------------------------- pipeline step

TAR_READ_BYTES = 1 << 20
IN_MEMORY_RESULT_BYTES = 32 << 20  # larger result.json files are spilled to disk and mapped


def _manifest_attempts(manifest: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """logs.manifest.json's per-attempt entries (state, bytes, lines) by slug."""
    entries = (manifest or {}).get("attempts") or []
    return {str(e["attempt"]): e for e in entries if isinstance(e, Mapping) and e.get("attempt")}


def _tar_logs(tar_path: Path, attempts: Sequence[str], manifest: Mapping[str, Any] | None = None
              ) -> tuple[list[tuple[str, ParsedLog]], list[AttemptWithoutMetrics]]:
    """Every attempt's trainer log from logs.tar (members attempts/<slug>/trainer.log), parsed
    as a stream, in the record's chain order: (logs with metrics, attempts without metrics).

    A readable log without any parsable metric line is a dead attempt (kept apart, with its state
    from the logs manifest); unparsable lines are skipped and counted; a missing member or an
    unreadable tar raises.
    """
    import tarfile

    described = _manifest_attempts(manifest)
    parsed: list[tuple[str, ParsedLog]] = []
    dead: list[AttemptWithoutMetrics] = []
    try:
        with tarfile.open(tar_path, "r:") as tar:
            for slug in attempts:
                name = f"attempts/{slug}/trainer.log"
                try:
                    member = tar.getmember(name)
                    handle = tar.extractfile(member)
                except KeyError:
                    handle = None
                if handle is None:
                    raise MetricsError(f"{tar_path}: no {name}: the trainer log of attempt {slug} was not synced")
                source = f"{tar_path.name}:{name}"
                entry = described.get(slug, {})
                with handle:
                    outcome = read_attempt(slug, iter(lambda: handle.read(TAR_READ_BYTES), b""), source,
                                           state=entry.get("state"), size=entry.get("bytes", member.size),
                                           lines=entry.get("lines"))
                if isinstance(outcome, AttemptWithoutMetrics):
                    dead.append(outcome)
                else:
                    parsed.append((slug, outcome))
    except (tarfile.TarError, OSError) as error:
        raise MetricsError(f"{tar_path}: cannot read the logs tar ({error}); rerun sync_logs") from error
    return parsed, dead


def _tar_results(tar_path: Path, scratch: Path) -> Iterator[tuple[str, Any]]:
    """(trial, result.json bytes or mmap) for every <trial>/result.json in trace_jobs.tar, one
    at a time; a large one is copied to scratch and mapped instead of read into memory."""
    import shutil
    import tarfile

    with tarfile.open(tar_path, "r:") as tar:
        for member in tar:
            parts = member.name.split("/")
            if len(parts) != 2 or parts[1] != "result.json" or not member.isfile():
                continue
            handle = tar.extractfile(member)
            if handle is None:
                continue
            with handle:
                if member.size <= IN_MEMORY_RESULT_BYTES:
                    yield parts[0], handle.read()
                    continue
                spill = scratch / "large-result.json"
                with open(spill, "wb") as out:
                    shutil.copyfileobj(handle, out, TAR_READ_BYTES)
            with open(spill, "rb") as mapped_file, mmap.mmap(mapped_file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield parts[0], mapped
            spill.unlink(missing_ok=True)


def metric_surface_step(ctx: StepContext) -> None:
    """`<job>/metrics/` surface files: every attempt's log in logs.tar (chain order from the
    record), the report and the plot. Attempts whose log holds no metric block are named, not
    fatal; the trace tarball is not read here (trial_table_step)."""
    from rlkeep.jsonio import read_json

    manifest = read_json(ctx.inputs["logs_manifest"]) if "logs_manifest" in ctx.inputs else None
    parsed, dead = _tar_logs(ctx.inputs["logs"], ctx.record.attempts, manifest)
    surface = surface_from_parsed(parsed, dead, chain=ctx.record.attempts)
    candidates = read_json(ctx.inputs["candidates"]).get("candidates", []) if "candidates" in ctx.inputs else None
    out_dir = ctx.outputs["metrics"].parent
    _check_outputs(ctx, out_dir, SURFACE_FILES)
    write_all(render_surface(surface, None, candidates=candidates,
                              behavior_break_step=ctx.record.behavior_break_step, job=ctx.job), out_dir)
    for info in surface.files:
        print(f"{info['source']}: {info['serialization']}, {len(info['steps'])} steps")
    for entry in dead:
        print(f"{entry.source}: no metrics ({entry.reason}; attempt state {entry.state or 'unknown'}): "
              "preserved in logs.tar, no rows")
    skipped = surface.skipped_lines()
    for entry in skipped[:MAX_SKIPPED_NAMED]:
        print(f"{entry['source']}:{entry['line']}: skipped {entry['kind']} line: {entry['reason']}")
    print(f"metrics: {len(surface.rows)} steps, {len(surface.superseded)} superseded rows, "
          f"{len(dead)} attempts without metrics, {len(skipped)} unparsable metric lines skipped")


def trial_table_step(ctx: StepContext) -> None:
    """`<job>/metrics/trials.csv` + `trials.md`: one row per trial from trace_jobs.tar."""
    out_dir = ctx.outputs["trials"].parent
    _check_outputs(ctx, out_dir, TRIAL_FILES)
    trials = trials_from_results(_tar_results(ctx.inputs["traces"], ctx.work_dir("trial_table")))
    write_all(render_trials(trials, job=ctx.job, source=ctx.inputs["traces"].name), out_dir)
    print(f"trials: {len(trials)} ({sum(1 for t in trials if t.get('error'))} malformed result.json)")


def _check_outputs(ctx: StepContext, out_dir: Path, names: Sequence[str]) -> None:
    foreign = sorted(str(path) for path in ctx.outputs.values() if path.parent != out_dir or path.name not in names)
    if foreign:
        raise MetricsError(f"outputs {foreign} are not among {', '.join(names)} in {out_dir}")
