"""Repo endpoints: whoami, repo creation and deletion, README metadata validation, repo info,
tree and paths-info listings, refs, commit history, branch creation, and file download (with
byte ranges).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import parse_qs, quote

import yaml

from rlkeep_dev.devserver.hub.handler import HandlerBase
from rlkeep_dev.devserver.hub.protocol import HubError, RepoRef, path_entry, sibling, tree_entries


class RepoEndpoints(HandlerBase):
    """Repo management and reads; HubHandler routes to them."""

    def _whoami(self) -> None:
        if self._auth_state() != "owner":
            raise HubError(401, "Invalid username or password.")
        self._send_json({"type": "user", "name": self.hub.user, "fullname": self.hub.user, "orgs": [],
                         "auth": {"type": "access_token",
                                  "accessToken": {"displayName": "rlkeep-dev", "role": "write"}}})

    def _create_repo(self) -> None:
        body = self._json_body()
        repo_type = body.get("type") or "model"
        name = body.get("name") or ""
        namespace = body.get("organization") or self.hub.user
        ref = self._repo_ref(repo_type, namespace, name)
        private = bool(body.get("private")) or body.get("visibility") in {"private", "protected"}
        url = f"{self._base_url()}/{ref.url_prefix}{ref.repo_id}"
        if not self.hub.store.create_repo(ref, private, self.hub.user):
            raise HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
        self._send_json({"url": url, "name": ref.repo_id, "id": ref.repo_id})

    def _delete_repo(self) -> None:
        body = self._json_body()
        ref = self._repo_ref(body.get("type") or "model", body.get("organization") or self.hub.user,
                             body.get("name") or "")
        self.hub.store.delete_repo(ref)
        self._send(200, b"")

    def _validate_yaml(self) -> None:
        body = self._json_body()
        content = body.get("content") or ""
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        if match:
            try:
                metadata = yaml.safe_load(match.group(1))
            except yaml.YAMLError as error:
                raise HubError(400, f"Invalid YAML in README.md metadata: {error}",
                               extra={"errors": [{"message": str(error)}]}) from None
            if metadata is not None and not isinstance(metadata, dict):
                raise HubError(400, "README.md metadata must be a YAML mapping",
                               extra={"errors": [{"message": "metadata must be a mapping"}]})
        self._send_json({"errors": [], "warnings": []})

    def _repo_info(self, ref: RepoRef, revision: str) -> None:
        repo = self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        commit = self.hub.store.commit(ref, sha)
        with_blobs = self.query.get("blobs", ["false"])[0].lower() in {"1", "true"}
        namespace, name = ref.repo_id.split("/")
        self._send_json({
            "_id": hashlib.sha1(ref.display.encode()).hexdigest()[:24], "id": ref.repo_id,
            "author": namespace, "sha": sha, "private": repo["private"], "gated": False, "disabled": False,
            "lastModified": commit["date"], "createdAt": repo["created_at"], "downloads": 0, "likes": 0,
            "tags": [], "cardData": {}, "usedStorage": 0,
            "siblings": [sibling(p, e, with_blobs) for p, e in sorted(commit["files"].items())],
        })

    def _tree(self, ref: RepoRef, revision: str, base: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        recursive = self.query.get("recursive", ["false"])[0].lower() in {"1", "true"}
        entries = tree_entries(self.hub.store.files_at(ref, sha), base.strip("/"), recursive)
        cursor = int(self.query.get("cursor", ["0"])[0])
        limit = int(self.query.get("limit", [str(self.hub.tree_page_size)])[0])
        page = entries[cursor: cursor + limit]
        headers = {}
        if cursor + limit < len(entries):
            api_type = f"{ref.repo_type}s"
            path = "/" + quote(base, safe="") if base else ""
            next_url = (f"{self._base_url()}/api/{api_type}/{ref.repo_id}/tree/{quote(revision, safe='')}{path}"
                        f"?recursive={str(recursive).lower()}&expand=false&limit={limit}&cursor={cursor + limit}")
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._send_json(page, headers=headers)

    def _paths_info(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        body = self._body().decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(body or "{}").get("paths", [])
        else:
            paths = parse_qs(body, keep_blank_values=True).get("paths", [])
        files = self.hub.store.files_at(ref, sha)
        entries = [entry for entry in (path_entry(files, p) for p in paths) if entry is not None]
        self._send_json(entries)

    def _refs(self, ref: RepoRef) -> None:
        repo = self._readable_repo(ref)
        result: dict[str, Any] = {
            "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": s} for n, s in repo["branches"].items()],
            "converts": [],
            "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": s} for n, s in repo["tags"].items()],
        }
        if "include_prs" in self.query:
            result["pullRequests"] = []
        self._send_json(result)

    def _commits(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        self._send_json([
            {"id": c["id"], "authors": [{"user": c["author"]}], "date": c["date"], "title": c["title"],
             "message": c["message"]}
            for c in self.hub.store.history(ref, sha)
        ])

    def _create_branch(self, ref: RepoRef, branch: str) -> None:
        body = self._json_body()
        self.hub.store.create_branch(ref, branch, body.get("startingPoint"))
        self._send_json({})

    # -- download ---------------------------------------------------------------------------------
    def _resolve(self, ref: RepoRef, revision: str, path: str) -> None:
        self._readable_repo(ref)
        sha = self.hub.store.resolve(ref, revision)
        files = self.hub.store.files_at(ref, sha)
        if path not in files:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", headers={"X-Repo-Commit": sha})
        entry = files[path]
        size = entry["size"]
        etag = entry["lfs"]["sha256"] if "lfs" in entry else entry["oid"]
        headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if "lfs" in entry:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(size)})
        if "xetHash" in entry and self.hub.xet is not None:  # a Xet download, through xet-read-token
            headers["X-Xet-Hash"] = entry["xetHash"]
            token_url = f"{self._base_url()}/api/{ref.repo_type}s/{ref.repo_id}/xet-read-token/{sha}"
            headers["Link"] = f'<{token_url}>; rel="xet-auth"'
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
            if not match or (match.group(1) == "" and match.group(2) == ""):
                raise HubError(416, f"unsupported Range {range_header!r}", headers={"Content-Range": f"bytes */{size}"})
            if match.group(1) == "":
                start, end = max(0, size - int(match.group(2))), size - 1
            else:
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size and size > 0 or start > end + 1:
                raise HubError(416, f"Range {range_header!r} is outside a file of {size} bytes",
                               headers={"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.method == "HEAD":
            return
        with open(self.hub.store.content_path(ref, entry), "rb") as handle:
            handle.seek(start)
            remaining = length
            while remaining:
                chunk = handle.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)
