"""Model publication: upload the staged model tree additively, replace its card in one commit
that touches no other file, and verify main by a fresh download (redaction check, publication
checks, download equals staging).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hub.checks import check_publication
from rlkeep.hub.client import (
    check_repo_id, download_fresh, ensure_repo, head_of, history_problems, require_dir, resolve_target,
)
from rlkeep.hub.transfer import commit_files
from rlkeep.hub.trees import (
    ALLOWED_REMOTE_EXTRAS, CARD_NAME, digest_files, downloaded_files, staged_files,
    tree_differences,
)
from rlkeep.redaction import redact_tree


def publish_model(stage_dir: Path, repo_id: str, *, private: bool, endpoint: str | None = None,
                  token: str | None = None, commit_message: str) -> dict[str, Any]:
    """Upload the staged model tree additively (remote files absent from staging stay).

    Returns {"repo_id", "repo_type", "commit", "created", "private", "no_op", "files"}; no_op
    means the Hub already held every staged file and no commit was made.
    """
    stage_dir = Path(stage_dir)
    require_dir(stage_dir, "model staging")
    check_repo_id(repo_id)
    files = staged_files(stage_dir)
    if not files:
        raise RlkeepError(f"{stage_dir}: model staging holds no file to publish")
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "model", private)
    head = head_of(api, target, repo_id, "model")
    note = f"Staging {stage_dir} is untouched; rerunning resumes (uploaded objects are reused)"
    # One commit holding every file (the runbook's --single_commit): upload_folder may split a
    # large folder into several commits when it uploads by Xet.
    info = commit_files(api, target, repo_id, "model", files, commit_message=commit_message, parent_commit=head,
                        step="upload", note=note)
    return {"repo_id": repo_id, "repo_type": "model", "commit": info.oid, "created": created,
            "private": is_private, "no_op": info.oid == head, "files": sorted(files)}


def publish_model_card(card: Path, repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                       commit_message: str) -> dict[str, Any]:
    """Replace README.md of an existing model repo in one commit that touches no other file.

    Returns {"repo_id", "repo_type", "commit", "parent", "no_op", "files"}; no_op means main
    already held this card and no commit was made.
    """
    card = Path(card)
    check_repo_id(repo_id)
    if not card.is_file():
        raise RlkeepError(f"{card}: the model card to publish is missing")
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "model")
    note = f"The card {card} is kept and the rest of the repo untouched; rerunning completes it"
    info = commit_files(api, target, repo_id, "model", {CARD_NAME: card}, commit_message=commit_message,
                        parent_commit=head, step="model card commit", note=note)
    return {"repo_id": repo_id, "repo_type": "model", "commit": info.oid, "parent": head,
            "no_op": info.oid == head, "files": [CARD_NAME]}


def finding_text(finding: Any) -> str:
    """Where a redaction finding is, never what it is."""
    kind = getattr(finding, "kind", None) or getattr(finding, "shape", "?")
    member = getattr(finding, "member", "")
    where = f"{getattr(finding, 'path', '?')}::{member}" if member else getattr(finding, "path", "?")
    return f"{where}:{getattr(finding, 'line', '?')} ({kind})"


def verify_model_publication(stage_dir: Path, repo_id: str, commit: str, work_dir: Path, *, redactor: Any,
                             endpoint: str | None = None, token: str | None = None,
                             traces_repo: str | None = None, pending_traces_link: bool = False,
                             card: Path | None = None) -> dict[str, Any]:
    """Fresh download of main into a new dir under `work_dir`, then: redaction check, publication
    checks, and the downloaded tree equals staging. Returns the evidence; raises RlkeepError
    listing every problem. Main having moved past `commit` is fine as long as its content still
    equals staging (a remote edit shows up as a content difference).

    pending_traces_link: check everything but the Training Traces link (which must not be there
    yet); card: the README.md that replaced staging's on the Hub (the card with the link).
    """

    stage_dir, work_dir = Path(stage_dir), Path(work_dir)
    require_dir(stage_dir, "model staging")
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "model")
    problems = history_problems(api, target, repo_id, "model", commit, head)
    work_dir.mkdir(parents=True, exist_ok=True)
    download_dir = Path(tempfile.mkdtemp(prefix=f"model-{head[:12]}-", dir=work_dir))
    download_fresh(repo_id, download_dir, repo_type="model", revision=head, endpoint=target.endpoint,
                   token=target.token)
    redaction = redact_tree(download_dir, redactor, check=True)
    findings = list(redaction.findings)
    if findings:
        shown = ", ".join(finding_text(finding) for finding in findings[:20])
        problems.append(f"redaction check: {len(findings)} credential-shaped finding(s) in the download: {shown}")
    if redaction.unreadable:
        shown = "; ".join(f"{path}: {reason}" for path, reason in redaction.unreadable[:20])
        problems.append(f"redaction check: {len(redaction.unreadable)} file(s) in the download could not be read, so "
                        f"they are not known to hold no credential: {shown}")
    problems += check_publication(download_dir, expected_dataset=traces_repo, pending_traces_link=pending_traces_link)
    remote = digest_files(downloaded_files(download_dir))
    expected = staged_files(stage_dir)
    if card is not None:
        expected[CARD_NAME] = Path(card)
    problems += tree_differences(digest_files(expected), remote)
    if problems:
        raise RlkeepError(target.scrub(
            f"model repo {repo_id} at {target.endpoint} failed verification (main at {head}, published {commit}; "
            f"download in {download_dir}):\n" + "\n".join(f"  - {problem}" for problem in problems)))
    return {
        "status": "completed", "repo_id": repo_id, "repo_type": "model", "commit": commit, "verified_commit": head,
        "url": target.repo_url(repo_id), "download_dir": str(download_dir),
        "files": [{"path": rel, "size": d.size, "sha256": d.sha256} for rel, d in sorted(remote.items())],
        "remote_extras": sorted(remote.keys() & ALLOWED_REMOTE_EXTRAS), "redaction_findings": 0,
        "redaction_files_scanned": getattr(redaction, "files_scanned", None),
        "redaction_files_skipped": [list(item) for item in getattr(redaction, "files_skipped", [])],
        "publication_problems": 0,
        "checks": ["fresh download", "redaction check",
                   "check-publication --pending-traces-link" if pending_traces_link else "check-publication",
                   "download equals staging" + (" with the linked model card" if card is not None else "")],
    }
