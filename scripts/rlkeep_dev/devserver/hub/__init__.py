"""A Hugging Face Hub-compatible HTTP server for tests and `make demo`.

It speaks the subset of the Hub protocol that huggingface_hub 2.4 uses to create repos, upload
(preupload -> Xet CAS or LFS batch/PUT/verify -> NDJSON commit), list, and download (see
docs/reference.md, Hub protocol), in one of two modes. Xet mode (`xet=True`, `--xet`): the
`xet-*-token` endpoints name hf_xet's disk-backed CAS at `local://<root>/xet-cas`, which the
unmodified client uploads to and downloads from (xet.py). LFS mode (the default): they answer 501,
"no Xet storage", and a client uploading LFS-sized files by Xet fails loudly.

State lives under a root directory so other processes and tests can inspect it:

    <root>/repos/<type>s/<ns>/<name>/repo.json          private flag, branches, tags
    <root>/repos/<type>s/<ns>/<name>/commits/<sha>.json  parent, message, full file map
    <root>/repos/<type>s/<ns>/<name>/blobs/<git-sha1>    regular file contents
    <root>/repos/<type>s/<ns>/<name>/lfs/<sha256>        LFS object contents
    <root>/incoming/                                     uploads in flight
    <root>/xet-cas/                                      the Xet CAS (Xet mode): xorbs and shards

A commit is written first and the branch moves afterwards with one atomic rename of
repo.json, so a commit applies fully or not at all. `stored_blobs(root)` enumerates every stored
byte (file contents, unreferenced objects, metadata) for secret scans.

Run as a process: `python -m rlkeep_dev.devserver.hub --root DIR [--port 0] [--token T]
--ready-file F` writes {"url", "pid"} to F once listening and stops cleanly on SIGTERM.

One module per job: protocol (limits, LFS rules, paths, RepoRef, HubError, listing shapes),
store (the state above and stored_blobs), handler (HTTP plumbing and auth), repos and uploads
(the endpoints), xet (the local CAS: its token, what it received, sha256 -> Xet hash, a file
reconstructed), routes (which endpoint a request reaches; the admin endpoints) and server
(HubServer: lifecycle, fault injection, request log, remote edits; the process entry point).
The public names are re-exported here.
"""
from __future__ import annotations

from rlkeep_dev.devserver.hub.protocol import (
    DEFAULT_CHUNK_SIZE, DEFAULT_MULTIPART_THRESHOLD, DEFAULT_TREE_PAGE_SIZE, DEFAULT_USER, FAULT_KINDS,
    INITIAL_GITATTRIBUTES, LFS_SIZE_THRESHOLD, NAME_RE, REPO_TYPES, SHA1_RE, SHA256_RE, XET_MESSAGE, HubError,
    RepoRef, check_repo_path, directories_of, directory_entry, file_entry, git_blob_sha1, lfs_patterns, lfs_pointer,
    matches_lfs_pattern, now_iso, path_entry, sibling, split_raw_path, tree_entries, upload_mode,
)
from rlkeep_dev.devserver.hub.routes import HubHandler
from rlkeep_dev.devserver.hub.server import HubServer, main
from rlkeep_dev.devserver.hub.store import HubStore, stored_blobs

__all__ = [
    "DEFAULT_CHUNK_SIZE", "DEFAULT_MULTIPART_THRESHOLD", "DEFAULT_TREE_PAGE_SIZE", "DEFAULT_USER", "FAULT_KINDS",
    "INITIAL_GITATTRIBUTES", "LFS_SIZE_THRESHOLD", "NAME_RE", "REPO_TYPES", "SHA1_RE", "SHA256_RE", "XET_MESSAGE",
    "HubError", "HubHandler", "HubServer", "HubStore", "RepoRef", "check_repo_path", "directories_of",
    "directory_entry", "file_entry", "git_blob_sha1", "lfs_patterns", "lfs_pointer", "main", "matches_lfs_pattern",
    "now_iso", "path_entry", "sibling", "split_raw_path", "stored_blobs", "tree_entries", "upload_mode",
]
