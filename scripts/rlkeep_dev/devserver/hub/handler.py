"""HTTP plumbing of the request handler: one entry for every method (routing, auth, the injected
fault, then the endpoint), request bodies (sized or chunked), answers and Hub-style errors, the
bearer-token check and repo visibility. The endpoints live in repos.py and uploads.py, the
routing table in routes.py.
"""
from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from rlkeep_dev.devserver.hub.protocol import NAME_RE, REPO_TYPES, HubError, RepoRef, split_raw_path

if TYPE_CHECKING:  # server.py builds on the handler: its types are only annotations here
    from rlkeep_dev.devserver.hub.server import HubServer, _HTTPServer


class HandlerBase(BaseHTTPRequestHandler):
    """What every endpoint builds on: request entry, bodies, answers, auth, repo references."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes on kept-alive connections
    server: "_HTTPServer"

    # -- plumbing -------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the request log (/_admin/requests) replaces stderr noise

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        self.hub: HubServer = self.server.hub
        self.method = method
        self.body_consumed = False
        split = urlsplit(self.path)
        self.raw_path, self.query = split.path, parse_qs(split.query)
        self.segments = split_raw_path(self.raw_path)
        self.kind, self.logged = "unknown", False
        try:
            route, self.kind = self._route()
            self._check_auth(self.kind)
            self.hub._take_fault(self.kind)
            route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-response
        except Exception as error:  # a HubError, or a server bug: answer, never hang the client
            if not isinstance(error, HubError):
                error = HubError(500, f"internal error: {type(error).__name__}: {error}")
            if self.logged:  # the answer has started: the only honest signal left is a cut connection
                self.close_connection = True
            else:
                self._drain_body()
                self._send_error(error)
        finally:
            if not self.logged:  # no answer went out (the client vanished first)
                self.hub._log_request(method, self.raw_path, 0, self.kind)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Log before any byte of the answer leaves: a client that saw the answer finds it in the log.
        if not getattr(self, "logged", True):  # errors raised by http.server before _handle are not logged
            self.hub._log_request(self.method, self.raw_path, code, self.kind)
            self.logged = True
        super().send_response(code, message)

    def _base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.hub.host_port}"

    def _body_chunks(self) -> Iterator[bytes]:
        """The request body, streamed; handles Content-Length and chunked transfer encoding."""
        self.body_consumed = True
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield from self._exactly(size)
                self.rfile.readline()
        else:
            yield from self._exactly(int(self.headers.get("Content-Length") or 0))

    def _exactly(self, size: int) -> Iterator[bytes]:
        """`size` bytes of the request body in pieces of at most 1 MiB; a body that ends early is a 400."""
        remaining = size
        while remaining:
            chunk = self.rfile.read(min(remaining, 1 << 20))
            if not chunk:
                raise HubError(400, "request body ended early")
            remaining -= len(chunk)
            yield chunk

    def _body(self) -> bytes:
        return b"".join(self._body_chunks())

    def _drain_body(self) -> None:
        if not self.body_consumed:
            try:
                for _ in self._body_chunks():
                    pass
            except (HubError, OSError, ValueError):
                self.close_connection = True

    def _json_body(self) -> Any:
        try:
            return json.loads(self._body() or b"{}")
        except ValueError as error:
            raise HubError(400, f"request body is not JSON: {error}") from None

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.method != "HEAD":
            self.wfile.write(body)

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None,
                   content_type: str = "application/json") -> None:
        self._send(status, json.dumps(obj).encode(), content_type, headers)

    def _send_error(self, error: HubError) -> None:
        headers = {"X-Error-Message": error.message.replace("\n", " ")[:1000], **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send_json({"error": error.message, **error.extra}, error.status, headers)

    # -- auth -----------------------------------------------------------------------------------
    def _auth_state(self) -> str:
        """'owner' (valid token or no token configured), 'anonymous', or 'invalid'."""
        header = self.headers.get("Authorization")
        if self.hub.token is None:
            return "owner"
        if header is None:
            return "anonymous"
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), self.hub.token):
            return "owner"
        return "invalid"

    def _check_auth(self, kind: str) -> None:
        if kind in {"lfs_put", "lfs_complete"}:
            return  # presigned: the signature in the URL is the credential (checked by the route)
        state = self._auth_state()
        if state == "invalid":
            raise HubError(401, "Invalid credentials in Authorization header")
        if state == "anonymous" and kind not in {"info", "tree", "paths_info", "download", "xet_read", "refs",
                                                   "commits", "validate_yaml", "unknown"}:
            raise HubError(401, "Invalid username or password.")

    def _readable_repo(self, ref: RepoRef) -> dict[str, Any]:
        repo = self.hub.store.load_repo(ref)
        if repo["private"] and self._auth_state() != "owner":
            raise HubError(401, "Repository not found", "RepoNotFound")
        return repo

    # -- routing --------------------------------------------------------------------------------
    def _route(self) -> tuple[Any, str]:
        """(the endpoint to call, its request kind) for this request; routes.HubHandler decides."""
        raise NotImplementedError

    def _repo_ref(self, repo_type: str, namespace: str, name: str) -> RepoRef:
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"invalid repo type {repo_type!r}")
        if not (NAME_RE.fullmatch(namespace) and NAME_RE.fullmatch(name)):
            raise HubError(400, f"invalid repo id {namespace}/{name}")
        return RepoRef(repo_type, f"{namespace}/{name}")
