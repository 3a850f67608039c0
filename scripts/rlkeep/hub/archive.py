"""Archive copy in a dataset repo (archive.dest: hf://datasets/<org>/<name>): one additive
commit of the archive and its MANIFEST under `<job>/`, verified by a fresh download of both.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.hub.client import check_repo_id, ensure_repo, head_of, resolve_target
from rlkeep.hub.failures import hub_step
from rlkeep.hub.transfer import commit_files
from rlkeep.hub.trees import FileDigest


def upload_archive_to_hub(tgz: Path, manifest: Path, repo_id: str, job: str, *, private: bool = True,
                          endpoint: str | None = None, token: str | None = None) -> dict[str, Any]:
    """Add `<job>/<tgz name>` and `<job>/MANIFEST` to a dataset repo in one additive commit (every
    other file of the repo stays), then download both fresh at that commit and compare size and
    sha256 with the local files. Any difference raises RlkeepError."""
    tgz, manifest = Path(tgz), Path(manifest)
    check_repo_id(repo_id)
    if not job or "/" in job or job in {".", ".."}:
        raise RlkeepError(f"archive upload: job {job!r} is not a valid folder name")
    for path in (tgz, manifest):
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; build and verify the archive before uploading it")
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "dataset", private)
    head = head_of(api, target, repo_id, "dataset")
    info = commit_files(api, target, repo_id, "dataset", {f"{job}/{path.name}": path for path in (tgz, manifest)},
                        commit_message=f"rlkeep: archive {job}", parent_commit=head, step="archive upload",
                        note=f"the local archive {tgz} is untouched; rerun")
    objects = []
    with tempfile.TemporaryDirectory(prefix="rlkeep-archive-verify-") as scratch:
        for path in (tgz, manifest):
            name = f"{job}/{path.name}"
            with hub_step(target, "dataset", repo_id, f"download of {name} at {info.oid}"):
                fresh = Path(api.hf_hub_download(repo_id, name, repo_type="dataset", revision=info.oid,
                                                 local_dir=scratch))
            local = FileDigest(path.stat().st_size, sha256_file(path))
            remote = FileDigest(fresh.stat().st_size, sha256_file(fresh))
            if remote != local:
                raise RlkeepError(f"dataset repo {repo_id} at {target.endpoint}: {name} downloaded fresh has "
                                  f"{remote.size} bytes, sha256 {remote.sha256}; local {path} has {local.size} bytes, "
                                  f"sha256 {local.sha256}; the archive upload is not verified")
            objects.append({"path_in_repo": name, "size": remote.size, "sha256": remote.sha256})
    return {"status": "completed", "dest": f"hf://datasets/{repo_id}/{job}", "repo_id": repo_id,
            "repo_type": "dataset", "commit": info.oid, "created": created, "private": is_private,
            "objects": objects,
            "verified": "size and sha256 of a fresh download at the upload commit, against the local files"}
