"""Publication to a Hugging Face Hub: the model (additive), the trace dataset (one replacing
commit), the archive copy in a dataset repo, and the checks that a fresh download of each is what
was staged.

The endpoint and token come from HF_ENDPOINT and HF_TOKEN (docs/contract.md §2) unless passed
explicitly. The token never appears in a message, an exception or returned evidence; without
HF_TOKEN no token is sent at all (a token saved for huggingface.co is never offered to another
endpoint). Uploads take huggingface_hub's default transfer, Xet, wherever the Hub offers it, and
the LFS protocol where the Hub answers it has no Xet (transfer.py); rlkeep sets nothing in
huggingface_hub's environment.

One module per job, each importing only those before it: calls (which protocol step a request
belongs to), ratelimits (waiting out HTTP 429 within a bound), target (endpoint, token, its HfApi),
failures (what a failed Hub call says), transfer (Xet or LFS, and the one commit of a publication),
client (repo creation, head, history, fresh download),
trees (which staged files are published, digests, tree differences), checks (what makes a
downloaded model repo a complete publication; `rlkeep check-publication`), card (the model card
and its Training Traces link), model and traces (each publication and its verification), archive
(the Hub archive upload) and step (the pipeline steps). The public names are re-exported here.
"""
from __future__ import annotations

from rlkeep.hub.archive import upload_archive_to_hub
from rlkeep.hub.calls import hub_call_of
from rlkeep.hub.card import TRACES_PENDING, link_traces_in_card, render_model_card, traces_section_body
from rlkeep.hub.checks import (
    PUBLIC_HUB, TRACES_HEADING, check_publication, check_publication_main, dataset_links, markdown_section,
)
from rlkeep.hub.client import (
    REPO_ID_RE, check_repo_id, download_fresh, ensure_repo, head_of, history_problems, require_dir,
)
from rlkeep.hub.failures import HUB_FAILURES, describe_hub_error, hub_step, status_of
from rlkeep.hub.model import finding_text, publish_model, publish_model_card, verify_model_publication
from rlkeep.hub.ratelimits import (
    DEFAULT_RATE_LIMIT_WAIT, RATE_LIMIT_WAIT_ENV, HubRateLimited, RateLimitTransport, install_rate_limit_handling,
    rate_limit_bound,
)
from rlkeep.hub.step import link_model_card_step, publish_model_step, publish_traces_step, stage_model_step
from rlkeep.hub.target import DEFAULT_ENDPOINT, HubTarget, resolve_target
from rlkeep.hub.transfer import Transfer, commit_files, hub_transfer
from rlkeep.hub.traces import DATA_SHARD_RE, MANIFEST_NAME, TRAIN_SHARD_RE, replace_trace_shards, verify_trace_publication
from rlkeep.hub.trees import (
    ALLOWED_REMOTE_EXTRAS, CARD_NAME, CLIENT_BOOKKEEPING, UPLOAD_IGNORE_PATTERNS, FileDigest, compare_trees,
    digest_files, downloaded_files, git_blob_sha1_file, is_published_path, remote_extras, staged_files, tree_bytes,
    tree_differences,
)

__all__ = [
    "ALLOWED_REMOTE_EXTRAS", "CARD_NAME", "CLIENT_BOOKKEEPING", "DATA_SHARD_RE", "DEFAULT_ENDPOINT",
    "DEFAULT_RATE_LIMIT_WAIT", "HUB_FAILURES", "MANIFEST_NAME", "PUBLIC_HUB", "RATE_LIMIT_WAIT_ENV", "REPO_ID_RE",
    "TRACES_HEADING", "TRACES_PENDING", "TRAIN_SHARD_RE", "UPLOAD_IGNORE_PATTERNS", "FileDigest", "HubRateLimited",
    "HubTarget", "RateLimitTransport", "Transfer", "check_publication", "check_publication_main", "check_repo_id",
    "commit_files", "compare_trees", "dataset_links", "describe_hub_error", "digest_files", "download_fresh",
    "downloaded_files", "ensure_repo", "finding_text", "git_blob_sha1_file", "head_of", "history_problems",
    "hub_call_of", "hub_step", "hub_transfer", "install_rate_limit_handling", "is_published_path",
    "link_model_card_step", "link_traces_in_card", "markdown_section", "publish_model", "publish_model_card",
    "publish_model_step", "publish_traces_step", "rate_limit_bound", "remote_extras", "render_model_card", "replace_trace_shards",
    "require_dir", "resolve_target", "stage_model_step", "staged_files", "status_of", "traces_section_body",
    "tree_bytes", "tree_differences", "upload_archive_to_hub", "verify_model_publication",
    "verify_trace_publication",
]
