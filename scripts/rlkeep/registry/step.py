"""The register step: register_step, the registry row, only when the record authorizes it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkeep.context import StepContext, not_applicable
from rlkeep.errors import RlkeepError
from rlkeep.jsonio import read_json, write_json
from rlkeep.registry import carry_interrupted_actions, register_run


def register_step(ctx: StepContext) -> None:
    """`<job>/register.json`: register only when the record says register.authorized (runbook step 6)."""

    register = ctx.record.register
    if not register or not register.get("authorized"):
        write_json(ctx.outputs["register"], not_applicable("register.authorized is not true in the record"))
        return
    publish = ctx.record.publish
    if publish is None or read_json(ctx.inputs["model"]).get("status") != "completed":
        raise RlkeepError(f"{ctx.record.path}: registration is authorized but the model was not published and "
                          "verified (register needs publish.model and verify/model.json)")
    if not ctx.record.base_model:
        raise RlkeepError(f"{ctx.record.path}: field 'base_model' is missing; registration needs the exact base-model "
                          "lineage and rlkeep never guesses it")
    traces_verified = read_json(ctx.inputs["traces"]).get("status") == "completed"
    request = {"model_repo": publish["model"], "trace_repo": publish["traces"] if traces_verified else None,
               "base_model": ctx.record.base_model, "training_type": "rl", "job": ctx.job, "owner": ctx.record.user}
    # The job's registration decision, journaled inside the transaction: a step stopped after its
    # commit (before register.json, or before Snakemake recorded the step) runs again and finds
    # nothing left to do; what it reports is still what registering this job did.
    journal = ctx.work_dir("register") / "decided.json"
    earlier = _earlier_decision(journal, request)
    evidence: dict[str, Any] = {}

    def journal_decision(decided: dict[str, Any]) -> None:
        evidence.update(carry_interrupted_actions(earlier, decided))
        write_json(journal, {"request": request, "evidence": evidence})

    register_run(register["url"], **request, before_commit=journal_decision)
    write_json(ctx.outputs["register"], {**evidence, "status": "completed"})


def _earlier_decision(journal: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """What an earlier attempt of this step decided for the same request (it may have been stopped
    before its commit, between its commit and its evidence, or have finished)."""
    if not journal.is_file():
        return None
    entry = read_json(journal)
    return entry.get("evidence") if entry.get("request") == request else None
