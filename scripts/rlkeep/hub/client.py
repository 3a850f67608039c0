"""The Hub client: where to publish (endpoint and token from HF_ENDPOINT and HF_TOKEN unless
passed), an HfApi for it with Xet off and rate limits handled, and the repo-level calls every
publication shares: create or reuse a repo, read its head, list its history, download it fresh.

Xet is off for every call (HF_HUB_DISABLE_XET=1 in the environment before huggingface_hub is imported:
rlkeep.hub's first statement): uploads then take the plain LFS protocol, which both the Hub and the
local test server (rlkeep_dev.devserver.hub) accept; each publication is one `create_commit`.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError

from rlkeep.errors import RlkeepError
from rlkeep.hub.failures import hub_step, status_of
from rlkeep.hub.ratelimits import install_rate_limit_handling
from rlkeep.hub.trees import CLIENT_BOOKKEEPING

DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID_RE = re.compile(  # a Hub repo id, org/name: the one pattern rlkeep checks them with
    r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class XetNotDisabled(RlkeepError):
    """huggingface_hub was imported before HF_HUB_DISABLE_XET=1 was set, so it would upload by Xet."""


def check_xet_disabled() -> None:
    """Check that uploads take LFS: huggingface_hub read HF_HUB_DISABLE_XET=1 when it was imported."""
    if not hf_constants.HF_HUB_DISABLE_XET:
        raise XetNotDisabled(
            "huggingface_hub was imported before rlkeep set HF_HUB_DISABLE_XET=1, so its uploads would take Xet, "
            "which rlkeep does not use: import rlkeep.hub first, or set HF_HUB_DISABLE_XET=1 in the environment")


@dataclass(frozen=True)
class HubTarget:
    endpoint: str
    token: str | None = field(default=None, repr=False)

    def api(self) -> HfApi:
        """An HfApi for reading (repo info, trees, downloads): a download takes Xet only where the Hub
        offers it for that file, so reads need nothing in huggingface_hub's environment."""
        install_rate_limit_handling()
        # token=False: never fall back to a token file saved for another Hub.
        return HfApi(endpoint=self.endpoint, token=self.token if self.token else False)

    def uploader(self) -> HfApi:
        """An HfApi for the calls that upload, checked to take LFS (see the module docstring)."""
        check_xet_disabled()
        install_rate_limit_handling()
        # token=False: never fall back to a token file saved for another Hub.
        return HfApi(endpoint=self.endpoint, token=self.token if self.token else False)

    def repo_url(self, repo_id: str, repo_type: str = "model") -> str:
        """Where this Hub serves the repo (the one place such a URL is joined): datasets under /datasets/."""
        return f"{self.endpoint}/{repo_id}" if repo_type == "model" else f"{self.endpoint}/{repo_type}s/{repo_id}"

    def scrub(self, text: str) -> str:
        """Defence in depth: no message built here should contain the token, but make sure."""
        if self.token and len(self.token) >= 8:  # shorter strings are not secrets, just noise to mask
            return text.replace(self.token, "<HF_TOKEN>")
        return text


def resolve_target(endpoint: str | None = None, token: str | None = None) -> HubTarget:
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    token = token if token is not None else os.environ.get("HF_TOKEN") or None
    return HubTarget(endpoint.rstrip("/"), token)


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
