"""One keep-alive HTTP/1.1 connection per thread and host, for presigned GETs and PUTs: a request
and its response head in a few C-level calls, a GET's body hashed while it streams into the sink,
a PUT's sent from its file by the kernel (sendfile) where the connection is not TLS.

ssl and certifi are imported when the first https connection opens (an import a file:// or
plain-http run never needs).
"""
from __future__ import annotations

import io
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import IO, BinaryIO
from urllib.parse import urlsplit

from rlkeep.errors import StoreError
from rlkeep.storage.failures import HttpStatusError, error_field
from rlkeep.storage.objects import CHUNK, ObjectMissing, hash_stream


class BodyEnded(StoreError):
    """The connection ended before the body did (a retry reads the object again)."""


_tls = None


def _tls_context():  # type: ignore[no-untyped-def]
    """The process's TLS context: AWS_CA_BUNDLE, else certifi's roots."""
    global _tls
    if _tls is None:
        import ssl

        import certifi

        _tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or certifi.where())
    return _tls


class Connection:
    """One keep-alive HTTP/1.1 connection, used by one thread: a GET and its response head in a
    few C-level calls (the header parsing of http.client was a seventh of the sync's CPU)."""

    def __init__(self, scheme: str, host: str) -> None:
        parts = urlsplit(f"{scheme}://{host}")
        self.scheme, self.host = scheme, host
        self.address = (parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        self.sock = None
        self.rfile = None
        self._ok = 200  # the status the request in flight expects

    def close(self) -> None:
        if self.rfile is not None:
            self.rfile.close()
        if self.sock is not None:
            self.sock.close()
        self.sock = self.rfile = None

    def _open(self) -> None:
        sock = socket.create_connection(self.address, timeout=10)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                sock = _tls_context().wrap_socket(sock, server_hostname=self.address[0])
            sock.settimeout(60)
        except BaseException:
            sock.close()
            raise
        self.sock, self.rfile = sock, sock.makefile("rb", buffering=1 << 16)

    def _status_line(self) -> bytes:
        assert self.rfile is not None
        status = self.rfile.readline(65537)
        if not status:
            raise ConnectionResetError("the server closed the connection before answering")
        return status

    def _exchange(self, send: Callable[[], None], sink: IO[bytes]) -> tuple[int, int, str]:
        """send() a request, then read its response into sink; a kept-alive connection the server
        closed while idle is replaced once. Error statuses raise HttpStatusError, with their body
        read so the connection stays usable."""
        reused = self.sock is not None
        if not reused:
            self._open()
        try:
            try:
                send()
                status_line = self._status_line()
            except ConnectionError:
                if not reused:
                    raise
                self.close()
                self._open()
                send()
                status_line = self._status_line()
            return self._response(status_line, sink)
        except BaseException:
            self.close()
            raise

    def get(self, target: str, sink: IO[bytes], byte_range: tuple[int, int] | None = None) -> tuple[int, int, str]:
        """GET target into sink: (bytes read, Content-Length or -1, sha256); 404 raises ObjectMissing.
        byte_range (offset, length) asks for those bytes only, and only a 206 answer is taken (no sha256)."""
        wanted = f"Range: bytes={byte_range[0]}-{byte_range[0] + byte_range[1] - 1}\r\n" if byte_range else ""
        request = (f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\nUser-Agent: rlkeep\r\n"
                   f"Accept-Encoding: identity\r\n{wanted}\r\n").encode()
        self._ok = 206 if byte_range else 200

        def send() -> None:
            assert self.sock is not None
            self.sock.sendall(request)

        try:
            return self._exchange(send, sink)
        except HttpStatusError as error:
            if error.status == 404:
                raise ObjectMissing("no such object") from None
            raise

    def put(self, target: str, body: BinaryIO, length: int, content_md5: str) -> None:
        """PUT the first `length` bytes of the open file `body` to target, presigned with this Content-MD5
        (the store refuses a body whose MD5 differs)."""
        self._ok = 200
        head = (f"PUT {target} HTTP/1.1\r\nHost: {self.host}\r\nUser-Agent: rlkeep\r\n"
                f"Content-Length: {length}\r\nContent-MD5: {content_md5}\r\n\r\n").encode()

        def send() -> None:
            assert self.sock is not None
            self.sock.sendall(head)
            body.seek(0)  # socket.sendfile seeks to a non-zero offset only
            try:
                sent = self.sock.sendfile(body, 0, length) if length else 0
            except (BrokenPipeError, ConnectionResetError):
                return  # the store answered (e.g. 403) and closed before taking the body: its answer tells
            if sent != length:
                raise BodyEnded(f"the file ended after {sent} of its {length} bytes")

        self._exchange(send, io.BytesIO())

    def _response(self, status_line: bytes, sink: IO[bytes]) -> tuple[int, int, str]:
        assert self.rfile is not None
        rfile = self.rfile
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise BodyEnded(f"not an HTTP response: {status_line[:80]!r}")
        status = int(parts[1])
        length, chunked, close = -1, False, parts[0] == b"HTTP/1.0"
        headers: dict[str, str] = {}  # kept for errors only (Retry-After, Date)
        while True:
            line = rfile.readline(65537)
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise BodyEnded("the connection ended inside the response headers")
            raw_name, _, value = line.partition(b":")
            name = raw_name.strip().lower()
            if status != self._ok:
                headers[raw_name.strip().decode("latin-1")] = value.strip().decode("latin-1")
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if status != self._ok and status in (200, 206):  # a Range the store ignored: never read a whole body here
            self.close()
            raise HttpStatusError(status, "RangeNotHonoured", headers)
        if status != self._ok:
            body = b"".join(self._chunks(length, chunked))
            if close:
                self.close()
            raise HttpStatusError(status, error_field(body, "Code"), headers, body)
        if self._ok == 206:  # a byte range is one piece of something its reader checks whole: no digest
            size, digest = 0, ""
            for chunk in self._chunks(length, chunked):
                sink.write(chunk)
                size += len(chunk)
        else:
            size, digest = hash_stream(self._chunks(length, chunked), sink)
        if close or (length < 0 and not chunked):
            self.close()
        return size, length, digest

    def _chunks(self, length: int, chunked: bool) -> Iterator[bytes]:
        assert self.rfile is not None
        rfile = self.rfile
        if chunked:
            while True:
                size = int(rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield from self._chunks(size, False)
                rfile.readline(3)
        elif length < 0:
            yield from iter(lambda: rfile.read(CHUNK), b"")
        else:
            left = length
            while left:
                chunk = rfile.read(min(CHUNK, left))
                if not chunk:
                    raise BodyEnded(f"body ended after {length - left} of {length} bytes")
                left -= len(chunk)
                yield chunk


_local = threading.local()


def connection_for(scheme: str, host: str) -> Connection:
    """This thread's connection to host (one per thread: no pool lock on the hot path)."""
    connections = getattr(_local, "connections", None)
    if connections is None:
        connections = _local.connections = {}
    connection = connections.get((scheme, host))
    if connection is None:
        connection = connections[(scheme, host)] = Connection(scheme, host)
    return connection
