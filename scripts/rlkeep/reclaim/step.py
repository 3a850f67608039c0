"""The reclaim step: reclaim_step deletes the run's own sources, only under authority and after
every verification of its kind; the decision and the plan are rlkeep.reclaim's."""
from __future__ import annotations

from typing import Any

from rlkeep.archive import iter_manifest_entries
from rlkeep.context import StepContext
from rlkeep.jsonio import read_json, write_json
from rlkeep.pipeline import verify_sentinels
from rlkeep.reclaim import execute_reclaim, plan_id, plan_reclaim, preservation, reclaim_decision
from rlkeep.sync import is_weight_or_dump


def reclaim_step(ctx: StepContext) -> None:
    """`<job>/reclaim.json`: delete the run's own source objects, only under explicit authority and
    only after every verify sentinel of the run's kind exists (runbook step 7); otherwise record
    why nothing was.

    Weights are kept when the model was not published and verified by this pipeline (every sft,
    datagen and eval run, and an rl run without publish): ckpts/ and exports/, and every object
    the sync skipped as weights. Reclaiming them would lose the run's only copy.
    """

    required = verify_sentinels(ctx.record.kind)
    sentinels = {name: read_json(ctx.inputs[name]) for name in required if name in ctx.inputs}
    journal_path = ctx.work_dir("reclaim") / "journal.json"
    act, reason = reclaim_decision(authorized=bool(ctx.settings.get("authorized")), verify_sentinels=sentinels,
                                   required=required)
    if not act:
        if journal_path.is_file() and read_json(journal_path).get("finished"):
            # an earlier invocation reclaimed under authority: keep saying so, and where things are kept
            earlier = journal_path.with_name("reclaim.json")
            if earlier.is_file():
                write_json(ctx.outputs["reclaim"], {**read_json(earlier),
                                                    "reason": "reclaimed by an earlier authorized invocation"})
                return
            result = read_json(journal_path)
            write_json(ctx.outputs["reclaim"], {"status": "completed", "deleted_keys": result.get("deleted_keys", 0),
                                                "deleted_bytes": result.get("deleted_bytes", 0),
                                                "reason": "reclaimed by an earlier authorized invocation",
                                                "journal": str(journal_path)})
            return
        write_json(ctx.outputs["reclaim"], {"status": "not_applicable", "deleted_keys": 0, "deleted_bytes": 0,
                                            "reason": f"nothing was deleted: {reason}"})
        return
    manifests = {"logs": read_json(ctx.inputs["logs_manifest"])}
    if "traces_manifest" in ctx.inputs:
        manifests["traces"] = read_json(ctx.inputs["traces_manifest"])
    plan = plan_reclaim(ctx.record, manifests)
    kept_weights: list[dict[str, Any]] = []
    if (sentinels.get("model") or {}).get("status") != "completed":
        weight_prefixes = tuple(ctx.record.layout[name].strip("/") + "/" for name in ("ckpts", "exports"))
        kept_weights = [o for o in plan["objects"]
                        if o["key"].startswith(weight_prefixes) or is_weight_or_dump(o["key"]) == "excluded_weights"]
        plan = _without(plan, {o["key"] for o in kept_weights})

    archive_entries = {entry.member: entry.reason for entry in iter_manifest_entries(ctx.inputs["archive_manifest"])}
    # every planned object must be preserved somewhere provable (or left out on purpose) before any delete
    preservation(plan["objects"], record=ctx.record, manifests=manifests, archive_entries=archive_entries,
                 sentinels=sentinels)
    plan_path = ctx.work_dir("reclaim") / "plan.json"
    write_json(plan_path, plan)  # the plan is written before anything is deleted
    result = execute_reclaim(plan, journal_path)
    not_deleted = set(result["missing"]) | {item["key"] for item in result["kept_changed"]}
    deleted = [item for item in plan["objects"] if item["key"] not in not_deleted]
    evidence = {
        "status": "completed", "authorized_by": f"--config reclaim_authorized={ctx.job}",
        "kind": ctx.record.kind, "plan": str(plan_path), "planned_keys": len(plan["objects"]),
        "planned_bytes": plan["bytes"], "kept_unpublished_weights": len(kept_weights), **result,
        "preserved": preservation(deleted, record=ctx.record, manifests=manifests, archive_entries=archive_entries,
                                  sentinels=sentinels),
    }
    write_json(journal_path.with_name("reclaim.json"), evidence)  # restated by a later unauthorized rerun
    write_json(ctx.outputs["reclaim"], evidence)


def _without(plan: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """The same plan minus some keys, with its id and totals recomputed."""
    objects = [o for o in plan["objects"] if o["key"] not in keys]
    return {**plan, "objects": objects, "keys": len(objects), "bytes": sum(o["size"] for o in objects),
            "plan_id": plan_id(plan["store"], objects)}
