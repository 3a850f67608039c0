"""The request handler: which endpoint a method and path reach (the admin endpoints for fault
injection, the request log and remote edits; the presigned LFS URLs; the /api routes; the git-style
LFS batch and resolve URLs), and the request kind faults and the request log name it by.
"""
from __future__ import annotations

import base64
from typing import Any

from rlkeep_dev.devserver.hub.protocol import HubError
from rlkeep_dev.devserver.hub.repos import RepoEndpoints
from rlkeep_dev.devserver.hub.uploads import UploadEndpoints


class HubHandler(RepoEndpoints, UploadEndpoints):
    """The handler the server runs: every endpoint, reached through the routing below."""

    # -- routing --------------------------------------------------------------------------------
    def _route(self) -> tuple[Any, str]:
        s, m = self.segments, self.method
        if s[:1] == ["_admin"]:
            return self._admin, "admin"
        if s[:1] == ["_lfs"] and len(s) >= 5:
            ref = self._repo_ref(s[1].removesuffix("s"), s[2], s[3])
            rest = s[4:]
            if m == "PUT" and len(rest) == 1:
                return (lambda: self._lfs_put(ref, rest[0])), "lfs_put"
            if m == "PUT" and len(rest) == 3 and rest[1] == "part":
                return (lambda: self._lfs_put_part(ref, rest[0], rest[2])), "lfs_put"
            if m == "POST" and len(rest) == 2 and rest[1] == "complete":
                return (lambda: self._lfs_complete(ref, rest[0])), "lfs_complete"
            if m == "POST" and len(rest) == 2 and rest[1] == "verify":
                return (lambda: self._lfs_verify(ref, rest[0])), "lfs_verify"
        if s[:1] == ["api"]:
            return self._route_api(s[1:], m)
        return self._route_git(s, m)

    def _route_api(self, s: list[str], m: str) -> tuple[Any, str]:
        if s == ["whoami-v2"] and m == "GET":
            return self._whoami, "whoami"
        if s == ["repos", "create"] and m == "POST":
            return self._create_repo, "create"
        if s == ["repos", "delete"] and m == "DELETE":
            return self._delete_repo, "delete_repo"
        if s == ["validate-yaml"] and m == "POST":
            return self._validate_yaml, "validate_yaml"
        if len(s) >= 3 and s[0] in {"models", "datasets", "spaces"}:
            ref = self._repo_ref(s[0][:-1], s[1], s[2])
            action, args = (s[3] if len(s) > 3 else None), s[4:]
            rev = args[0] if args else "main"
            table: dict[tuple[str | None, str], tuple[Any, str]] = {
                (None, "GET"): (lambda: self._repo_info(ref, "main"), "info"),
                ("revision", "GET"): (lambda: self._repo_info(ref, rev), "info"),
                ("tree", "GET"): (lambda: self._tree(ref, rev, "/".join(args[1:])), "tree"),
                ("paths-info", "POST"): (lambda: self._paths_info(ref, rev), "paths_info"),
                ("preupload", "POST"): (lambda: self._preupload(ref, rev), "preupload"),
                ("commit", "POST"): (lambda: self._commit(ref, rev), "commit"),
                ("refs", "GET"): (lambda: self._refs(ref), "refs"),
                ("commits", "GET"): (lambda: self._commits(ref, rev), "commits"),
                ("branch", "POST"): (lambda: self._create_branch(ref, rev), "branch"),
                ("xet-write-token", "GET"): (lambda: self._xet_token(ref), "xet_token"),
                ("xet-read-token", "GET"): (lambda: self._xet_token(ref), "xet_read"),
            }
            if (action, m) in table:
                return table[(action, m)]
        raise HubError(404, f"no such endpoint: {m} {self.raw_path}")

    def _route_git(self, s: list[str], m: str) -> tuple[Any, str]:
        repo_type = "model"
        if s and s[0] in {"datasets", "spaces"}:
            repo_type, s = s[0][:-1], s[1:]
        if len(s) == 6 and s[1].endswith(".git") and s[2:] == ["info", "lfs", "objects", "batch"] and m == "POST":
            ref = self._repo_ref(repo_type, s[0], s[1].removesuffix(".git"))
            return (lambda: self._lfs_batch(ref)), "lfs_batch"
        if len(s) >= 5 and s[2] == "resolve" and m in {"GET", "HEAD"}:
            ref = self._repo_ref(repo_type, s[0], s[1])
            return (lambda: self._resolve(ref, s[3], "/".join(s[4:]))), "download"
        raise HubError(404, f"no such endpoint: {m} {self.raw_path}")

    # -- admin ------------------------------------------------------------------------------------
    def _admin(self) -> None:
        if self._auth_state() != "owner":
            raise HubError(401, "Invalid credentials in Authorization header")
        s, m = self.segments[1:], self.method
        if s == ["faults"] and m == "POST":
            body = self._json_body()
            self.hub.fail_next(str(body.get("kind")), int(body.get("count", 1)), int(body.get("status", 500)))
            self._send_json({"faults": self.hub.faults()})
        elif s == ["faults"] and m == "DELETE":
            self.hub.clear_faults()
            self._send_json({"faults": {}})
        elif s == ["faults"] and m == "GET":
            self._send_json({"faults": self.hub.faults()})
        elif s == ["requests"] and m == "GET":
            self._send_json(self.hub.requests())
        elif s == ["requests"] and m == "DELETE":
            self.hub.clear_requests()
            self._send_json([])
        elif s == ["edit"] and m == "POST":
            body = self._json_body()
            sha = self.hub.edit_file(body["repo_id"], body["path"], base64.b64decode(body["content_b64"]),
                                     repo_type=body.get("repo_type", "model"))
            self._send_json({"commitOid": sha})
        else:
            raise HubError(404, f"no such admin endpoint: {m} {self.raw_path}")
