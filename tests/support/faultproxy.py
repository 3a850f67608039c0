"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the real S3 server.

Requests are forwarded unchanged (the Host header too, so SigV4 signatures still verify);
chosen requests instead get a connection reset, a 503 SlowDown (with `Retry-After` when
`retry_after` is set), a 500, a truncated body or a stall. Faults are planned either as
"the next N requests matching X" or as a rate.

Two behaviours of real stores beyond faults:
- list-after-write lag (`lag_list`, `lag_get`): an object written through the proxy stays out of
  the next N listings of its bucket, or answers 404 to the next N GET/HEADs of its key, while
  the other path already sees it;
- clock skew (`clock_offset`): the store's clock runs `clock_offset` seconds off this machine's.
  A request whose SigV4 time (X-Amz-Date, header or presigned query) is more than 15 minutes
  from the store's clock is refused as S3 does (403 RequestTimeTooSkewed), so is a SigV2 presigned
  URL whose Expires has passed by the store's clock (403 AccessDenied, "Request has expired"), and
  every answer's Date header is the store's clock.
"""
from __future__ import annotations

import email.utils
import http.client
import random
import re
import socket
import threading
import time
from datetime import datetime, timezone
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
MAX_SKEW_SECONDS = 15 * 60  # what S3 allows between a request's signing time and its own clock
NO_SUCH_KEY_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
    b"<Message>The specified key does not exist.</Message></Error>"
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
    retry_after: str | None = None  # the Retry-After header of SlowDown answers
    lag_list: int = 0  # a written object is missing from the next N listings of its bucket
    lag_get: int = 0  # a written object answers 404 to the next N GET/HEADs of its key
    clock_offset: float = 0.0  # the store's clock minus this machine's, in seconds
    plans: list[FaultPlan] = field(default_factory=list)
    lagging: dict[str, list[int]] = field(default_factory=dict)  # /bucket/key -> [listings left, reads left]
    lag_served: list[tuple[str, str]] = field(default_factory=list)  # (how, /bucket/key) each time lag hid one
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, outcome)
    timeline: list[tuple[float, str, str, str]] = field(default_factory=list)  # (monotonic time, method, path, outcome)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_next(self, kind: str, count: int = 1, *, method: str | None = None, path_contains: str = "",
                  query_contains: str = "") -> FaultPlan:
        """Answer the next `count` matching requests with `kind`; the plan's `remaining` says how many are left."""
        assert kind in FAULT_KINDS + REFUSAL_KINDS, kind

        def matches(request_method: str, target: str) -> bool:
            path, _, query = target.partition("?")
            return ((method is None or request_method == method) and path_contains in path
                    and query_contains in query)

        plan = FaultPlan(kind, count, matches)
        with self._lock:
            self.plans.append(plan)
        return plan

    def fail_always(self, kind: str) -> None:
        self.fail_next(kind, 10**9)

    def clear(self) -> None:
        with self._lock:
            self.plans.clear()
            self.rate = 0.0

    def store_now(self) -> float:
        return time.time() + self.clock_offset

    def _skew_refusal(self, headers: object, target: str) -> bytes | None:
        """The 403 body S3 sends when the request was signed too far from the store's clock."""
        stamp = headers.get("X-Amz-Date") or ""  # type: ignore[attr-defined]
        if not stamp:
            match = re.search(r"[?&]X-Amz-Date=(\d{8}T\d{6}Z)", target)
            stamp = match.group(1) if match else ""
        expires = re.search(r"[?&]Expires=(\d+)", target)
        if not stamp and expires:  # a SigV2 presigned URL: refused once expired by the store's clock
            if self.store_now() <= int(expires.group(1)):
                return None
            return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                    f"<Message>Request has expired</Message><Expires>{expires.group(1)}</Expires>"
                    f"<ServerTime>{int(self.store_now())}</ServerTime></Error>").encode()
        if not stamp:
            return None
        signed = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
        now = self.store_now()
        if abs(signed - now) <= MAX_SKEW_SECONDS:
            return None
        server_time = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>RequestTimeTooSkewed</Code>'
                "<Message>The difference between the request time and the current time is too large.</Message>"
                f"<RequestTime>{stamp}</RequestTime><ServerTime>{server_time}</ServerTime>"
                f"<MaxAllowedSkewMilliseconds>{MAX_SKEW_SECONDS * 1000}</MaxAllowedSkewMilliseconds></Error>").encode()

    def _note_write(self, method: str, target: str, status: int) -> None:
        path, _, query = target.partition("?")
        completes = (method == "PUT" and "uploadId=" not in query) or (method == "POST" and "uploadId=" in query)
        if (self.lag_list or self.lag_get) and completes and 200 <= status < 300 and path.count("/") >= 2:
            with self._lock:
                self.lagging[path] = [self.lag_list, self.lag_get]

    def _hidden_from_read(self, method: str, target: str) -> bool:
        path, _, query = target.partition("?")
        if method not in {"GET", "HEAD"} or "list-type" in query or "uploads" in query:
            return False
        with self._lock:
            left = self.lagging.get(path)
            if left is None or left[1] <= 0:
                return False
            left[1] -= 1
            self.lag_served.append(("read", path))
            return True

    def _hide_from_listing(self, target: str, payload: bytes) -> bytes:
        path, _, query = target.partition("?")
        if "list-type" not in query or path.strip("/").count("/") > 0:
            return payload
        bucket = "/" + path.strip("/")
        hidden = 0
        with self._lock:
            for key_path, left in self.lagging.items():
                if not key_path.startswith(bucket + "/") or left[0] <= 0:
                    continue
                key = key_path[len(bucket) + 1:]
                entry = re.compile(rb"<Contents>(?:(?!</Contents>).)*<Key>" + re.escape(key.encode()) +
                                   rb"</Key>.*?</Contents>", re.S)
                payload, count = entry.subn(b"", payload)
                left[0] -= 1
                if count:
                    hidden += count
                    self.lag_served.append(("list", key_path))
        if hidden:
            payload = re.sub(rb"<KeyCount>(\d+)</KeyCount>",
                             lambda m: b"<KeyCount>%d</KeyCount>" % max(0, int(m.group(1)) - hidden), payload)
        return payload

    def _record(self, method: str, target: str, outcome: str) -> None:
        self.log.append((method, target, outcome))
        self.timeline.append((time.monotonic(), method, target, outcome))

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
                if proxy.clock_offset:
                    refusal = proxy._skew_refusal(self.headers, self.path)
                    if refusal is not None:
                        proxy._record(self.command, self.path, "skewed")
                        self._answer(403, refusal)
                        return
                if proxy._hidden_from_read(self.command, self.path):
                    proxy._record(self.command, self.path, "lagging")
                    self._answer(404, b"" if self.command == "HEAD" else NO_SUCH_KEY_BODY)
                    return
                fault = proxy._choose(self.command, self.path, rng)
                proxy._record(self.command, self.path, fault or "ok")
                if fault == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    self.close_connection = True
                    return
                if fault in {"slowdown", "error500", "forbidden"}:
                    status, payload = {"slowdown": (503, SLOWDOWN_BODY), "error500": (500, ERROR500_BODY),
                                       "forbidden": (403, FORBIDDEN_BODY)}[fault]
                    extra = {"Retry-After": proxy.retry_after} if fault == "slowdown" and proxy.retry_after else {}
                    self._answer(status, payload, extra)
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
                proxy._note_write(self.command, self.path, response.status)
                if self.command == "GET":
                    payload = proxy._hide_from_listing(self.path, payload)
                dropped = {"transfer-encoding", "connection", "date"}  # send_response sent the store's
                self.send_response(response.status)
                if self.command == "HEAD":
                    for key, value in response.getheaders():
                        if key.lower() not in dropped:
                            self.send_header(key, value)
                    self.end_headers()
                    return
                for key, value in response.getheaders():
                    if key.lower() in dropped | {"content-length"}:
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

            def date_time_string(self, timestamp: float | None = None) -> str:
                """The Date header http.server sends with every answer: the store's clock."""
                return email.utils.formatdate(proxy.store_now() if timestamp is None else timestamp, usegmt=True)

            def _answer(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
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
