"""The generation_stats step: generation_stats_step, vLLM and batch-error figures from logs.tar."""
from __future__ import annotations

from rlkeep import vllm_stats
from rlkeep.context import StepContext
from rlkeep.generation_stats import FILES, GenerationStatsError, render, scan_logs_tar
from rlkeep.jsonio import atomic_write_bytes


def generation_stats_step(ctx: StepContext) -> None:
    """The rule's outputs (FILES, each declared by its own name) from ctx.inputs["logs"]."""
    stats = scan_logs_tar(ctx.inputs["logs"], ctx.record.attempts, ctx.record.layout.get("logs", "logs"))
    rendered = render(stats, job=ctx.job)
    by_name = {path.name: path for path in ctx.outputs.values()}
    unknown = sorted(set(by_name) - set(FILES))
    if unknown or len(by_name) != len(ctx.outputs):
        raise GenerationStatsError(f"outputs {sorted(map(str, ctx.outputs.values()))} are not {', '.join(FILES)}")
    for name, path in by_name.items():
        atomic_write_bytes(path, rendered[name])
    per_second = vllm_stats.per_second(stats.vllm)
    print(f"vLLM: {len(stats.vllm.samples)} engine reports in {len(per_second)} seconds; batch errors: "
          f"{sum(s.batches for s in stats.errors.steps)} batches in {len(stats.errors.steps)} steps; "
          f"{len(stats.read)} log files read, {len(stats.not_read)} not read (generation.md says why)"
          + (f"; attempts without a trainer log: {', '.join(stats.missing)}" if stats.missing else ""))
