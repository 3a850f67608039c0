"""Upload endpoints: preupload (which files go through LFS), the Xet token endpoints (the local
CAS in Xet mode, 501 in LFS mode), the NDJSON commit (in Xet mode an `lfsFile` uploaded by Xet is
reconstructed into the LFS store first), and the LFS protocol (batch, signed single and multipart
PUT, completion, verify), which both modes accept.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlkeep.jsonio import atomic_write_bytes
from rlkeep_dev.devserver.hub.handler import HandlerBase
from rlkeep_dev.devserver.hub.protocol import SHA256_RE, XET_MESSAGE, HubError, RepoRef, lfs_patterns, upload_mode


class UploadEndpoints(HandlerBase):
    """Preupload, commit and LFS upload; HubHandler routes to them."""

    def _xet_token(self, ref: RepoRef) -> None:
        """The CAS a Xet upload or download goes to; in LFS mode the answer that there is no Xet."""
        self._readable_repo(ref)
        if self.hub.xet is None:
            raise HubError(501, XET_MESSAGE)
        body, headers = self.hub.xet.token()
        self._send_json(body, headers=headers)

    def _from_xet(self, ref: RepoRef, operation: dict[str, Any]) -> None:
        """An `lfsFile` uploaded by Xet: its Xet hash on the operation, its bytes in the LFS store."""
        xet = self.hub.xet
        sha256, size = operation["sha256"], operation.get("size")
        if xet is None or not SHA256_RE.fullmatch(sha256):
            return
        file_hash = xet.file_hash(sha256)
        if file_hash is None:
            return  # not uploaded by Xet: the commit needs it in the LFS store (apply_commit checks)
        operation["xet_hash"] = file_hash
        if self.hub.store.has_lfs_object(ref, sha256, size) or not isinstance(size, int):
            return
        incoming = self.hub.store.root / "incoming" / f"xet-{file_hash}"
        incoming.parent.mkdir(parents=True, exist_ok=True)
        try:
            xet.reconstruct(file_hash, size, incoming)
            with open(incoming, "rb") as handle:
                self.hub.store.store_lfs_object(ref, sha256, size, iter(lambda: handle.read(1 << 20), b""))
        finally:
            incoming.unlink(missing_ok=True)

    def _preupload(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        if "create_pr" in self.query:
            raise HubError(501, "pull requests are not supported by this test server")
        files = self.hub.store.files_at(ref, self.hub.store.resolve(ref, revision))
        body = self._json_body()
        patterns = self._lfs_patterns(ref, files)
        answers = []
        for item in body.get("files", []):
            path = item.get("path", "")
            try:
                sample = base64.b64decode(item.get("sample") or "", validate=True)
            except binascii.Error:
                raise HubError(400, f"preupload: sample of {path!r} is not base64") from None
            answer = {"path": path, "uploadMode": upload_mode(path, int(item.get("size", 0)), sample, patterns),
                      "shouldIgnore": False}
            remote = files.get(path)
            if remote is not None:
                answer["oid"] = remote["lfs"]["sha256"] if "lfs" in remote else remote["oid"]
            answers.append(answer)
        self._send_json({"files": answers, "commitOid": self.hub.store.resolve(ref, revision)})

    def _lfs_patterns(self, ref: RepoRef, files: dict[str, dict[str, Any]]) -> list[str]:
        entry = files.get(".gitattributes")
        if entry is None:
            return []
        return lfs_patterns(self.hub.store.content_path(ref, entry).read_bytes().decode("utf-8", "replace"))

    def _commit(self, ref: RepoRef, revision: str) -> None:
        self._readable_repo(ref)
        if "create_pr" in self.query:
            raise HubError(501, "pull requests are not supported by this test server")
        header: dict[str, Any] | None = None
        operations: list[dict[str, Any]] = []
        for number, line in enumerate(self._body().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError):
                raise HubError(400, f"commit payload line {number} is not a {{key, value}} JSON object") from None
            if key == "header":
                header = value
            else:
                operations.append(self._commit_operation(key, value, number))
        if header is None:
            raise HubError(400, "commit payload has no header line")
        for operation in operations:
            if operation["op"] == "lfs":
                self._from_xet(ref, operation)
        sha = self.hub.store.apply_commit(ref, revision, header.get("summary") or "", header.get("description") or "",
                                          header.get("parentCommit"), operations, self.hub.user)
        self._send_json({"commitUrl": f"{self._base_url()}/{ref.url_prefix}{ref.repo_id}/commit/{sha}",
                         "commitOid": sha, "success": True})

    def _commit_operation(self, key: str, value: dict[str, Any], number: int) -> dict[str, Any]:
        path = value.get("path", "")
        if key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"commit line {number}: only base64 encoding is supported")
            try:
                return {"op": "file", "path": path, "content": base64.b64decode(value.get("content", ""), validate=True)}
            except binascii.Error:
                raise HubError(400, f"commit line {number}: content of {path!r} is not base64") from None
        if key == "lfsFile":
            if value.get("algo", "sha256") != "sha256":
                raise HubError(400, f"commit line {number}: only sha256 LFS objects are supported")
            return {"op": "lfs", "path": path, "sha256": value.get("oid", ""), "size": value.get("size")}
        if key == "deletedFile":
            return {"op": "delete_file", "path": path}
        if key == "deletedFolder":
            return {"op": "delete_folder", "path": path}
        raise HubError(400, f"commit line {number}: unknown key {key!r}")

    # -- LFS --------------------------------------------------------------------------------------
    def _lfs_batch(self, ref: RepoRef) -> None:
        self._readable_repo(ref)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise HubError(400, "only the LFS upload operation is supported")
        base = f"{self._base_url()}/_lfs/{ref.repo_type}s/{ref.repo_id}"
        objects = []
        for item in body.get("objects", []):
            oid, size = item.get("oid"), item.get("size")
            if not (isinstance(oid, str) and SHA256_RE.fullmatch(oid) and isinstance(size, int) and size >= 0):
                objects.append({"oid": str(oid), "size": int(size or 0),
                                "error": {"code": 422, "message": "oid must be a sha256 and size an integer"}})
                continue
            answer: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if not self.hub.store.has_lfs_object(ref, oid, size):
                signature = self.hub.sign(ref, oid, size)
                query = f"?size={size}&sig={signature}"
                verify = {"href": f"{base}/{oid}/verify{query}", "header": {}}
                if size > self.hub.multipart_threshold and "multipart" in body.get("transfers", ["basic"]):
                    chunk = self.hub.chunk_size
                    parts = max(1, -(-size // chunk))
                    header = {"chunk_size": str(chunk)}
                    header.update({str(n): f"{base}/{oid}/part/{n}{query}" for n in range(1, parts + 1)})
                    upload = {"href": f"{base}/{oid}/complete{query}", "header": header}
                else:
                    upload = {"href": f"{base}/{oid}{query}"}
                answer["actions"] = {"upload": upload, "verify": verify}
            objects.append(answer)
        self._send_json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                        content_type="application/vnd.git-lfs+json")

    def _check_signature(self, ref: RepoRef, oid: str) -> int:
        size_text = self.query.get("size", [""])[0]
        signature = self.query.get("sig", [""])[0]
        if not size_text.isdigit() or not hmac.compare_digest(signature, self.hub.sign(ref, oid, int(size_text))):
            raise HubError(403, "invalid or missing upload signature")
        return int(size_text)

    def _lfs_put(self, ref: RepoRef, oid: str) -> None:
        size = self._check_signature(ref, oid)
        self.hub.store.store_lfs_object(ref, oid, size, self._body_chunks())
        self._send(200, b"", headers={"ETag": f'"{oid}"'})

    def _parts_dir(self, ref: RepoRef, oid: str) -> Path:
        digest = hashlib.sha1(f"{ref.display}/{oid}".encode()).hexdigest()
        return self.hub.store.root / "incoming" / f"parts-{digest}"

    def _lfs_put_part(self, ref: RepoRef, oid: str, number: str) -> None:
        self._check_signature(ref, oid)
        if not number.isdigit():
            raise HubError(400, f"invalid part number {number!r}")
        directory = self._parts_dir(ref, oid)
        directory.mkdir(parents=True, exist_ok=True)
        data = self._body()
        atomic_write_bytes(directory / f"{int(number):06d}", data)
        self._send(200, b"", headers={"ETag": f'"{hashlib.md5(data).hexdigest()}"'})

    def _lfs_complete(self, ref: RepoRef, oid: str) -> None:
        size = self._check_signature(ref, oid)
        body = self._json_body()
        directory = self._parts_dir(ref, oid)
        numbers = [part.get("partNumber") for part in body.get("parts", [])]
        if numbers != list(range(1, len(numbers) + 1)):
            raise HubError(400, "parts must be numbered 1..N in order")

        def chunks() -> Iterator[bytes]:
            for number in numbers:
                path = directory / f"{number:06d}"
                if not path.is_file():
                    raise HubError(400, f"part {number} of {oid} was never uploaded")
                yield path.read_bytes()

        self.hub.store.store_lfs_object(ref, oid, size, chunks())
        shutil.rmtree(directory, ignore_errors=True)
        self._send_json({})

    def _lfs_verify(self, ref: RepoRef, oid: str) -> None:
        body = self._json_body()
        if not self.hub.store.has_lfs_object(ref, oid, body.get("size")):
            raise HubError(404, f"LFS object {oid} is not stored")
        self._send_json({})
