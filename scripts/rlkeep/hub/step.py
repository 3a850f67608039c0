"""Pipeline steps: stage the model, publish and verify it, publish and verify the traces, and
link the verified trace dataset from the model card. Each reads its paths from the StepContext
and writes its verify sentinel; the Hub work is in model.py and traces.py.
"""
from __future__ import annotations

import logging
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from rlkeep.context import StepContext, not_applicable
from rlkeep.errors import RlkeepError
from rlkeep.export.writer import link_or_copy
from rlkeep.hub.card import link_traces_in_card, render_model_card
from rlkeep.hub.checks import check_publication
from rlkeep.hub.client import resolve_target
from rlkeep.hub.model import finding_text, publish_model, publish_model_card, verify_model_publication
from rlkeep.hub.traces import MANIFEST_NAME, replace_trace_shards, verify_trace_publication
from rlkeep.hub.trees import CARD_NAME, tree_bytes
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.redaction import redact_tree, redactor_from_environment
from rlkeep.regions import check_transfer

log = logging.getLogger(__name__)


def _training_logs(ctx: StepContext, logs_dir: Path) -> list[str]:
    """Metric surface, its report and the chain's trainer logs into training_logs/. Nothing here
    comes from the trace tree: model publication never waits on the trace sync."""
    names = []
    for key in ("metrics", "report", "superseded", "eval", "plot"):
        path = ctx.inputs.get(key)
        if path is not None and path.is_file():
            shutil.copyfile(path, logs_dir / path.name)
            names.append(path.name)
    for key in ("selected", "export", "chain"):
        path = ctx.inputs.get(key)
        if path is not None and path.is_file():
            (logs_dir / "rlkeep").mkdir(exist_ok=True)
            shutil.copyfile(path, logs_dir / "rlkeep" / path.name)
            names.append(f"rlkeep/{path.name}")
    with tarfile.open(ctx.inputs["logs"]) as tar:
        for slug in ctx.record.attempts:
            member = tar.extractfile(f"attempts/{slug}/trainer.log")
            if member is None:
                raise RlkeepError(f"{ctx.inputs['logs']}: no trainer log for attempt {slug}")
            target = logs_dir / "trainer" / f"{slug}.log"
            target.parent.mkdir(exist_ok=True)
            with open(target, "wb") as handle:
                shutil.copyfileobj(member, handle)
            names.append(f"trainer/{slug}.log")
    return sorted(names)


def refuse_unreadable(where: Path, unreadable: list[tuple[str, str]]) -> None:
    """Fail closed: what redaction could not read is not known to hold no credential."""
    if unreadable:
        shown = "; ".join(f"{path}: {reason}" for path, reason in unreadable[:10])
        raise RlkeepError(f"{where}: {len(unreadable)} file(s) or member(s) could not be read by redaction, so they "
                          f"are not known to hold no credential ({shown}); nothing was published: remove them or "
                          "convert them to a readable format at the source, then rerun")


def stage_model_step(ctx: StepContext) -> None:
    """`<job>/stage/model/`: flat model + training_logs/ + model card, redacted and checked locally."""

    publish = ctx.record.publish
    if publish is None:
        raise RlkeepError(f"{ctx.record.path}: no publish section; staging a model for publication is not applicable")
    stage = ctx.outputs["stage"]
    partial = stage.with_name(f".{stage.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for source in sorted(ctx.inputs["model"].iterdir()):
            if source.is_file() and not source.name.startswith("."):
                link_or_copy(source, partial / source.name)
        logs_dir = partial / "training_logs"
        logs_dir.mkdir(parents=True)
        names = _training_logs(ctx, logs_dir)
        card = render_model_card(job=ctx.job, publish=publish, base_model=ctx.record.base_model,
                                 selected=read_json(ctx.inputs["selected"]), export=read_json(ctx.inputs["export"]),
                                 chain=read_json(ctx.inputs["chain"]), tracker_url=ctx.record.tracker_url,
                                 training_logs=names)  # its trace link waits for verify/traces.json
        (partial / "README.md").write_text(card, encoding="utf-8")
        redactor = redactor_from_environment()
        redacted = redact_tree(partial, redactor)
        remaining = redact_tree(partial, redactor, check=True)
        if remaining.findings:
            raise RlkeepError(f"{stage}: credential-shaped text remains after redaction: "
                              + ", ".join(finding_text(f) for f in remaining.findings[:10]))
        refuse_unreadable(stage, remaining.unreadable)
        problems = check_publication(partial, pending_traces_link=True)
        if problems:
            raise RlkeepError(f"{stage}: staged model is not publishable: " + "; ".join(problems))
        if stage.exists():
            shutil.rmtree(stage)
        os.replace(partial, stage)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    write_json(ctx.outputs["redaction"], {
        "status": "completed",
        "redacted": [{"kind": f.kind, "path": f.path, "line": f.line} for f in redacted.findings],
        "files_scanned": remaining.files_scanned,
        "files_skipped": [{"path": p, "reason": r} for p, r in remaining.files_skipped],
        "check_findings": 0,
    })


def _destinations_or_not_applicable(ctx: StepContext) -> dict[str, Any] | None:
    """The record's publish block; without one, the verify sentinel says why nothing was published."""

    if ctx.record.publish is None:
        write_json(ctx.outputs["verify"], not_applicable("the record names no publish destinations"))
    return ctx.record.publish


def publish_model_step(ctx: StepContext) -> None:
    """`<job>/verify/model_upload.json`: upload the staged model additively (its card's trace link
    pending), download fresh, run the redaction check and every publication check but the link."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    stage = ctx.inputs["stage"]
    check_transfer(ctx, nbytes=tree_bytes(stage), what=f"model upload to {publish['model']}")
    published = publish_model(stage, publish["model"], private=bool(publish.get("private", True)),
                              commit_message=f"rlkeep: publish {ctx.job}")
    work_dir = ctx.work_dir("publish_model")
    evidence = verify_model_publication(stage, publish["model"], published["commit"], work_dir,
                                        redactor=redactor_from_environment(), pending_traces_link=True)
    download = evidence.get("download_dir")
    if download:
        shutil.rmtree(download, ignore_errors=True)
    write_json(ctx.outputs["verify"], {**evidence, "status": "completed", "published": published,
                                       "training_traces_link": "pending trace verification"})


def _verified_traces(ctx: StepContext, repo_id: str) -> dict[str, Any]:
    """verify/traces.json of this record's trace dataset: the destination the card may link."""

    path = ctx.inputs["traces"]
    evidence = read_json(path)
    if not isinstance(evidence, dict) or evidence.get("status") != "completed":
        status = evidence.get("status") if isinstance(evidence, dict) else type(evidence).__name__
        raise RlkeepError(f"{path}: status {status!r}; the model card links the trace dataset only once it is "
                          "verified (status 'completed')")
    if evidence.get("repo_id") != repo_id:
        raise RlkeepError(f"{path}: verifies {evidence.get('repo_id')!r}, not the record's publish.traces "
                          f"{repo_id!r}; rerun publish_traces")
    return evidence


def link_model_card_step(ctx: StepContext) -> None:
    """`<job>/verify/model.json`: once the trace dataset is verified, link it from the model card
    in one commit that changes README.md only, download fresh and run every check again, the link
    included. The card committed is kept in <job>/stage/model_card/README.md."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    upload = read_json(ctx.inputs["upload"])
    if upload.get("status") != "completed":
        raise RlkeepError(f"{ctx.inputs['upload']}: status {upload.get('status')!r}; the model must be uploaded "
                          "and verified before its card is completed")
    repo_id = publish.get("traces")
    if not repo_id:
        raise RlkeepError(f"{ctx.record.path}: field 'publish.traces' is missing; the model card's Training Traces "
                          "section needs the trace dataset the record names")
    traces = _verified_traces(ctx, repo_id)
    stage = ctx.inputs["stage"]
    card = ctx.job_dir / "stage" / "model_card" / CARD_NAME
    # The link names the dataset by its repo id at the Hub in use, not at the address verify/traces.json
    # was written against: the endpoint may have moved since (another port, a mirror).
    url = resolve_target().repo_url(repo_id, "dataset")
    linked = link_traces_in_card((stage / CARD_NAME).read_text(encoding="utf-8"), repo_id, url)
    atomic_write_bytes(card, linked.encode("utf-8"))
    redactor = redactor_from_environment()
    findings = redact_tree(card.parent, redactor, check=True).findings
    if findings:
        raise RlkeepError(f"{card}: credential-shaped text in the model card: "
                          + ", ".join(finding_text(finding) for finding in findings[:10]))
    published = publish_model_card(card, publish["model"],
                                   commit_message=f"rlkeep: link the verified trace dataset {repo_id}")
    if published["no_op"]:
        log.info("the model repo's main already holds this card (an earlier invocation committed it); verifying it")
    evidence = verify_model_publication(stage, publish["model"], published["commit"], ctx.work_dir("link_model_card"),
                                        redactor=redactor, traces_repo=repo_id, card=card)
    download = evidence.get("download_dir")
    if download:
        shutil.rmtree(download, ignore_errors=True)
    write_json(ctx.outputs["verify"], {
        **evidence, "status": "completed", "published": published, "upload_commit": upload.get("commit"),
        "card": card.relative_to(ctx.job_dir).as_posix(),
        "training_traces_link": {"dataset": repo_id, "url": url, "traces_commit": traces.get("commit")},
    })


def publish_traces_step(ctx: StepContext) -> None:
    """`<job>/verify/traces.json`: replace the remote shard set in one commit, then verify it."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    stage = ctx.inputs["stage"]
    manifest = read_json(stage / MANIFEST_NAME)
    check_transfer(ctx, nbytes=tree_bytes(stage), what=f"trace dataset upload to {publish['traces']}")
    from rlkeep.traces.stage import DATA_DIR  # rlkeep.traces imports rlkeep.hub: not at module level

    # the shards' string cells and metadata, read back before anything is uploaded
    shards = redact_tree(stage / DATA_DIR, redactor_from_environment(), check=True)
    if shards.findings:
        raise RlkeepError(f"{stage / DATA_DIR}: credential-shaped text in the staged shards: "
                          + ", ".join(finding_text(f) for f in shards.findings[:10]) + "; nothing was uploaded")
    refuse_unreadable(stage / DATA_DIR, shards.unreadable)
    published = replace_trace_shards(stage, publish["traces"], private=bool(publish.get("private", True)),
                                     commit_message=f"Replace trace export with {manifest.get('row_count')} rows")
    evidence = verify_trace_publication(stage, publish["traces"], published["commit"])
    write_json(ctx.outputs["verify"], {**evidence, "status": "completed", "published": published})
