"""The repo-level Hub calls every publication shares: create or reuse a repo, read its head, list
its history, download it fresh. The target (endpoint, token, its HfApi) is rlkeep.hub.target's;
how an upload transfers its files, rlkeep.hub.transfer's.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from rlkeep.errors import RlkeepError
from rlkeep.hub.failures import hub_step, status_of
from rlkeep.hub.target import DEFAULT_ENDPOINT, HubTarget, resolve_target  # re-exported: where callers import them
from rlkeep.hub.trees import CLIENT_BOOKKEEPING

__all__ = ["DEFAULT_ENDPOINT", "REPO_ID_RE", "HubTarget", "check_repo_id", "download_fresh", "ensure_repo", "head_of",
           "history_problems", "require_dir", "resolve_target"]

REPO_ID_RE = re.compile(  # a Hub repo id, org/name: the one pattern rlkeep checks them with
    r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_repo_id(repo_id: str) -> None:
    if not REPO_ID_RE.fullmatch(repo_id or ""):
        raise RlkeepError(f"invalid Hub repo id {repo_id!r}: expected <namespace>/<name>")


def ensure_repo(api: HfApi, target: HubTarget, repo_id: str, repo_type: str, private: bool) -> tuple[bool, bool]:
    """Create the repo when absent or reuse it; refuse a public repo for a private publication.

    Returns (created, private as the Hub reports it): a repo that is private although the
    record allows public stays private (the safer way round), and the evidence says so.
    """
    created = True
    with hub_step(target, repo_type, repo_id, "repo creation"):
        try:
            api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=False)
        except HfHubHTTPError as error:
            if status_of(error) != 409:  # 409: it exists already, which is fine
                raise
            created = False
    with hub_step(target, repo_type, repo_id, "repo info"):
        info = api.repo_info(repo_id, repo_type=repo_type)
    if private and not info.private:
        raise RlkeepError(f"{repo_type} repo {repo_id} at {target.endpoint} exists and is public, but the record "
                          f"asks for a private publication; nothing was uploaded (make the repo private or change "
                          f"publish.private)")
    return created, bool(info.private)


def head_of(api: HfApi, target: HubTarget, repo_id: str, repo_type: str) -> str:
    with hub_step(target, repo_type, repo_id, "repo info"):
        sha = api.repo_info(repo_id, repo_type=repo_type, revision="main").sha
    if not sha:
        raise RlkeepError(f"{repo_type} repo {repo_id} at {target.endpoint}: repo info has no commit sha")
    return sha


def require_dir(path: Path, what: str) -> None:
    if not path.is_dir():
        raise RlkeepError(f"{path}: {what} is not a directory")


def download_fresh(repo_id: str, dest: Path, *, repo_type: str, revision: str, endpoint: str | None = None,
                   token: str | None = None) -> Path:
    """Download the repo at `revision` into `dest`, a new or empty directory; nothing is left on failure."""
    dest = Path(dest)
    check_repo_id(repo_id)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise RlkeepError(f"{dest}: a fresh download needs a new empty directory")
    target = resolve_target(endpoint, token)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with hub_step(target, repo_type, repo_id, f"download of {revision}"):
            target.api().snapshot_download(repo_id=repo_id, repo_type=repo_type, revision=revision, local_dir=dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    shutil.rmtree(dest / CLIENT_BOOKKEEPING, ignore_errors=True)
    if (dest / ".cache").is_dir() and not any((dest / ".cache").iterdir()):
        (dest / ".cache").rmdir()
    return dest


def history_problems(api: HfApi, target: HubTarget, repo_id: str, repo_type: str, commit: str,
                     head: str) -> list[str]:
    """Empty when `commit` is main's head or in its history; else why the publication is not on main."""
    if head == commit:
        return []
    with hub_step(target, repo_type, repo_id, "commit history"):
        history = [entry.commit_id for entry in api.list_repo_commits(repo_id, repo_type=repo_type, revision=head)]
    if commit not in history:
        return [f"published commit {commit} is not in the history of main (now {head})"]
    return []
