"""The server object (`with HubServer(root, token=...) as hub: hub.url`): start and stop, upload
signatures, fault injection, the request log, remote edits by another user, and the process entry
point (`python -m rlkeep_dev.devserver.hub`).
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import signal
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlkeep.jsonio import write_json
from rlkeep_dev.devserver.hub.protocol import (
    DEFAULT_CHUNK_SIZE, DEFAULT_MULTIPART_THRESHOLD, DEFAULT_TREE_PAGE_SIZE, DEFAULT_USER, FAULT_KINDS, HubError,
    RepoRef, lfs_patterns, upload_mode,
)
from rlkeep_dev.devserver.hub.routes import HubHandler
from rlkeep_dev.devserver.hub.store import HubStore
from rlkeep_dev.devserver.hub.xet import XetCas


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    hub: "HubServer"


# ---------------------------------------------------------------------------------------------
# Server object


class HubServer:
    """In-process Hub-compatible server: `with HubServer(root, token=...) as hub: hub.url`."""

    def __init__(self, root: str | os.PathLike[str], token: str | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, user: str = DEFAULT_USER, multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, tree_page_size: int = DEFAULT_TREE_PAGE_SIZE,
                 xet: bool = False):
        self.store = HubStore(Path(root))
        # Xet mode: the token endpoints name a local CAS under the root; LFS mode: they answer 501.
        self.xet = XetCas(Path(root) / "xet-cas") if xet else None
        self.token = token
        self.user = user
        self.multipart_threshold = multipart_threshold
        self.chunk_size = chunk_size
        self.tree_page_size = tree_page_size
        self._host, self._port = host, port
        self._signing_key = secrets.token_bytes(32)
        self._faults: dict[str, list[int]] = {}
        self._requests: list[dict[str, Any]] = []
        self._state_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "HubServer":
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self._host, self._port), HubHandler)
        httpd.hub = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="rlkeep-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd, self._thread = None, None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host_port(self) -> str:
        if self._httpd is None:
            raise RuntimeError("HubServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.host_port}"

    @property
    def root(self) -> Path:
        return self.store.root

    def sign(self, ref: RepoRef, oid: str, size: int) -> str:
        return hmac.new(self._signing_key, f"{ref.display}/{oid}/{size}".encode(), hashlib.sha256).hexdigest()

    # -- fault injection and request log -------------------------------------------------------
    def fail_next(self, kind: str, count: int = 1, status: int = 500) -> None:
        """Make the next `count` requests of `kind` (see FAULT_KINDS) answer `status`."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if count < 0 or not 400 <= status <= 599:
            raise ValueError("count must be >= 0 and status a 4xx/5xx code")
        with self._state_lock:
            self._faults[kind] = [count, status]

    def clear_faults(self) -> None:
        with self._state_lock:
            self._faults.clear()

    def faults(self) -> dict[str, dict[str, int]]:
        with self._state_lock:
            return {k: {"count": c, "status": s} for k, (c, s) in self._faults.items() if c > 0}

    def _take_fault(self, kind: str) -> None:
        with self._state_lock:
            fault = self._faults.get(kind)
            if not fault or fault[0] <= 0:
                return
            fault[0] -= 1
            status = fault[1]
        raise HubError(status, f"injected fault: {kind} request failed with HTTP {status}")

    def _log_request(self, method: str, path: str, status: int, kind: str) -> None:
        with self._state_lock:
            self._requests.append({"method": method, "path": path, "status": status, "kind": kind})
            del self._requests[:-10000]

    def requests(self) -> list[dict[str, Any]]:
        with self._state_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._state_lock:
            self._requests.clear()

    # -- admin helpers ------------------------------------------------------------------------------
    def edit_file(self, repo_id: str, path: str, new_bytes: bytes, *, repo_type: str = "model",
                  author: str = "someone-else", message: str | None = None) -> str:
        """Commit `new_bytes` at `path` on main as another user (a remote edit); returns the commit sha."""
        ref = RepoRef(repo_type, repo_id)
        store = self.store
        with store.lock:
            files = store.files_at(ref, store.resolve(ref, "main"))
            patterns = lfs_patterns(store.content_path(ref, files[".gitattributes"]).read_text()) \
                if ".gitattributes" in files else []
            if upload_mode(path, len(new_bytes), new_bytes[:512], patterns) == "lfs":
                sha256 = hashlib.sha256(new_bytes).hexdigest()
                store.store_lfs_object(ref, sha256, len(new_bytes), [new_bytes])
                operation: dict[str, Any] = {"op": "lfs", "path": path, "sha256": sha256, "size": len(new_bytes)}
            else:
                operation = {"op": "file", "path": path, "content": new_bytes}
            return store.apply_commit(ref, "main", message or f"Update {path}", "", None, [operation], author)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlkeep_dev.devserver.hub",
                                     description="A Hugging Face Hub-compatible HTTP server for tests and `make demo`.")
    parser.add_argument("--root", required=True, type=Path, help="directory holding the server state")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default=os.environ.get("RLKEEP_HUB_TOKEN"),
                        help="accepted bearer token (default $RLKEEP_HUB_TOKEN; none: no auth)")
    parser.add_argument("--ready-file", type=Path, help="written with {url, pid} once listening")
    parser.add_argument("--xet", action="store_true", help="Xet mode: uploads and downloads through a local CAS")
    args = parser.parse_args(argv)

    server = HubServer(args.root, token=args.token, host=args.host, port=args.port, xet=args.xet).start()
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if args.ready_file is not None:
        write_json(args.ready_file, {"url": server.url, "pid": os.getpid()})
    print(f"rlkeep hub server listening on {server.url} (root {args.root})", flush=True)
    while not stopping.wait(0.5):
        pass
    server.stop()
    return 0
