"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the real S3 server.

Requests are forwarded unchanged (the Host header too, so SigV4 signatures still verify);
chosen requests instead get a connection reset, a 503 SlowDown, a 500, a truncated body or
a stall. Faults are planned either as "the next N requests matching X" or as a rate.
"""
from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

FAULT_KINDS = ("reset", "slowdown", "error500", "truncate", "stall")
# answers a correct store gives on purpose, never drawn by `rate`: a credential scoped to a sub-tree
REFUSAL_KINDS = ("forbidden",)
DENIED_PRINCIPAL = "arn:aws:iam::000000000000:user/scoped-reader"

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
FORBIDDEN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>User: " + DENIED_PRINCIPAL.encode() + b" is not authorized to perform: s3:GetObject</Message></Error>"
)
ERROR500_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


@dataclass
class FaultPlan:
    kind: str
    remaining: int
    matches: Callable[[str, str], bool]


@dataclass
class FaultProxy:
    upstream: str
    rate: float = 0.0
    rate_kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    stall_seconds: float = 2.0
    plans: list[FaultPlan] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, outcome)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_next(self, kind: str, count: int = 1, *, method: str | None = None, path_contains: str = "",
                  query_contains: str = "") -> None:
        assert kind in FAULT_KINDS + REFUSAL_KINDS, kind

        def matches(request_method: str, target: str) -> bool:
            path, _, query = target.partition("?")
            return ((method is None or request_method == method) and path_contains in path
                    and query_contains in query)

        with self._lock:
            self.plans.append(FaultPlan(kind, count, matches))

    def fail_always(self, kind: str) -> None:
        self.fail_next(kind, 10**9)

    def clear(self) -> None:
        with self._lock:
            self.plans.clear()
            self.rate = 0.0

    def faults_injected(self) -> int:
        return sum(1 for _, _, outcome in self.log if outcome != "ok")

    def _choose(self, method: str, target: str, rng: random.Random) -> str | None:
        with self._lock:
            for plan in self.plans:
                if plan.remaining > 0 and plan.matches(method, target):
                    plan.remaining -= 1
                    return plan.kind
            if self.rate and rng.random() < self.rate:
                return rng.choice(self.rate_kinds)
        return None

    def start(self) -> "FaultProxy":
        upstream = urlparse(self.upstream)
        proxy = self
        rng = random.Random(self.seed)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                fault = proxy._choose(self.command, self.path, rng)
                proxy.log.append((self.command, self.path, fault or "ok"))
                if fault == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    self.close_connection = True
                    return
                if fault in {"slowdown", "error500", "forbidden"}:
                    status, payload = {"slowdown": (503, SLOWDOWN_BODY), "error500": (500, ERROR500_BODY),
                                       "forbidden": (403, FORBIDDEN_BODY)}[fault]
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if fault == "stall":
                    time.sleep(proxy.stall_seconds)
                connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=120)
                try:
                    connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for key, value in self.headers.items():
                        if key.lower() in {"transfer-encoding"}:
                            continue
                        connection.putheader(key, value)
                    if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                        connection.putheader("Content-Length", str(len(body)))
                    connection.endheaders(body or None)
                    response = connection.getresponse()
                    payload = response.read()
                finally:
                    connection.close()
                self.send_response(response.status)
                if self.command == "HEAD":
                    for key, value in response.getheaders():
                        if key.lower() not in {"transfer-encoding", "connection"}:
                            self.send_header(key, value)
                    self.end_headers()
                    return
                for key, value in response.getheaders():
                    if key.lower() in {"transfer-encoding", "connection", "content-length"}:
                        continue
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if fault == "truncate" and len(payload) > 1:
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(payload)

            def _read_chunked(self) -> bytes:
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
