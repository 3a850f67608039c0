"""How a publication moves its files: huggingface_hub's default transfer, Xet, wherever the Hub
offers it; the LFS protocol only where the Hub answers that it has no Xet, said in the step's log.
Every publication is one `create_commit` holding all its operations (the runbook's --single_commit).

huggingface_hub 2.4 uploads every LFS-mode file of a commit by Xet when hf_xet is installed and
does not fall back when the Hub's `xet-write-token` endpoint says Xet is not there. So before the
commit rlkeep asks that endpoint itself (the request huggingface_hub would make next). When the
Hub answers it has no Xet (HTTP 501, or 404: it has no such endpoint), the files go to
create_commit as open files, which huggingface_hub itself uploads by the LFS protocol (its path
for file objects: "Falling back to HTTP upload"). Nothing is set in huggingface_hub's environment
or constants; a user's own HF_HUB_DISABLE_XET=1 is honoured by huggingface_hub, and said here.
"""
from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from huggingface_hub import CommitInfo, CommitOperationAdd, CommitOperationDelete, HfApi, get_session
from huggingface_hub import constants as hf_constants
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from rlkeep.hub.failures import hub_step
from rlkeep.hub.target import HubTarget

log = logging.getLogger("rlkeep")

NO_XET_STATUSES = (404, 501)  # the Hub's answers to xet-write-token that mean it has no Xet


@dataclass(frozen=True)
class Transfer:
    """How an upload moves LFS-mode files: by Xet or by the LFS protocol, and why (for the log)."""

    xet: bool
    why: str

    @property
    def name(self) -> str:
        return "Xet" if self.xet else "LFS"


def hub_transfer(target: HubTarget, repo_id: str, repo_type: str, revision: str = "main") -> Transfer:
    """Xet unless the user switched it off, hf_xet is missing, or the Hub answers it has no Xet."""
    if hf_constants.HF_HUB_DISABLE_XET:
        return Transfer(False, "HF_HUB_DISABLE_XET is set in the environment, so huggingface_hub uploads by LFS")
    if importlib.util.find_spec("hf_xet") is None:
        return Transfer(False, "hf_xet is not installed, so huggingface_hub uploads by LFS")
    url = f"{target.endpoint}/api/{repo_type}s/{repo_id}/xet-write-token/{quote(revision, safe='')}"
    with hub_step(target, repo_type, repo_id, "Xet token"):
        response = get_session().get(url, headers=build_hf_headers(token=target.token or False))
        if response.status_code in NO_XET_STATUSES:
            said = response.headers.get("X-Error-Message") or response.reason_phrase
            return Transfer(False, target.scrub(f"the Hub answers it has no Xet (HTTP {response.status_code} on "
                                                f"xet-write-token: {said.strip()})"))
        hf_raise_for_status(response)
    return Transfer(True, "the Hub offers Xet (huggingface_hub's default transfer)")


def _source(path: Path, transfer: Transfer, files: ExitStack) -> str | BinaryIO:
    """A path for Xet; an open file for LFS (huggingface_hub sends file objects by the LFS protocol)."""
    return str(path) if transfer.xet else files.enter_context(open(path, "rb"))


def commit_files(api: HfApi, target: HubTarget, repo_id: str, repo_type: str, adds: Mapping[str, Path], *,
                 deletes: Iterable[str] = (), commit_message: str, parent_commit: str, step: str,
                 note: str = "") -> CommitInfo:
    """One commit adding `adds` (path in repo -> local file) and deleting `deletes`, on top of
    `parent_commit`; the transfer is chosen by hub_transfer and logged."""
    transfer = hub_transfer(target, repo_id, repo_type)
    log.info("%s repo %s: uploading by %s: %s", repo_type, repo_id, transfer.name, transfer.why)
    with ExitStack() as files, hub_step(target, repo_type, repo_id, step, note):
        operations: list[CommitOperationAdd | CommitOperationDelete] = [
            CommitOperationAdd(path_in_repo=rel, path_or_fileobj=_source(path, transfer, files))
            for rel, path in adds.items()]
        operations += [CommitOperationDelete(path_in_repo=path, is_folder=False) for path in deletes]
        return api.create_commit(repo_id, operations, commit_message=commit_message, repo_type=repo_type,
                                 parent_commit=parent_commit)
