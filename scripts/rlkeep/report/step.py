"""The done step: done_step, the completion record (DONE) and REPORT.md."""
from __future__ import annotations

import time

from rlkeep.context import StepContext
from rlkeep.jsonio import atomic_write_bytes, write_json
from rlkeep.report import build_completion_record, render_report


def done_step(ctx: StepContext) -> None:
    done = build_completion_record(ctx.job_dir, ctx.record)
    done["completed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # the record this DONE describes: the campaign target leaves the job alone while it is unchanged
    done["record_sha256"] = ctx.settings.get("record_sha256")
    atomic_write_bytes(ctx.outputs["report"], render_report(done).encode("utf-8"))
    write_json(ctx.outputs["done"], done)
