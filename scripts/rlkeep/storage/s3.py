"""Object store access: `s3://bucket/prefix` over boto3 and `file:///path`, behind one interface.

Configuration comes from the standard boto3 sources only (docs/reference.md, contract §2):
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, and
AWS_CONFIG_FILE (e.g. `s3 = addressing_style = virtual` for CoreWeave). Checksums are sent
only when required, which Cloudflare R2 and other S3 clones need (boto/boto3#4392).

Keys handed to callers are relative to the store root URL. Every read records size and
sha256 while streaming; an ETag is never trusted as a content hash.
"""
from __future__ import annotations

import email.utils
import errno
import hashlib
import io
import logging
import os
import random
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol
from urllib.parse import urlparse

from rlkeep.errors import StoreError
from rlkeep.waits import seconds_from_env

log = logging.getLogger(__name__)

CHUNK = 1 << 20
API_ATTEMPTS = 5  # botocore's own retries (standard mode: 5xx, resets), with backoff
READ_ATTEMPTS = 4  # whole-object re-reads when a body breaks mid-stream
MULTIPART_BYTES = 64 << 20  # uploads above this go in parts of this size
SLOWDOWN_WAIT_ENV = "RLKEEP_STORE_SLOWDOWN_WAIT"
DEFAULT_SLOWDOWN_WAIT = 300.0  # seconds one request may spend waiting out SlowDown answers
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                            "TooManyRequests", "RequestThrottled"})
SKEW_CODES = frozenset({"RequestTimeTooSkewed", "SignatureDoesNotMatch", "RequestExpired", "AccessDenied"})
SKEW_TELLS_SECONDS = 300  # a Date header this far off ours makes a signature refusal a clock problem


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root, '/'-separated, never absolute, never '..'
    size: int
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class FetchedObject:
    info: ObjectInfo
    body: IO[bytes] | None  # positioned at 0; None when the object vanished after listing or was denied
    sha256: str | None
    denied: "ObjectDenied | None" = None  # the store refused this read (HTTP 403)

    def read(self) -> bytes:
        assert self.body is not None
        return self.body.read()

    def close(self) -> None:
        if self.body is not None:
            self.body.close()


class Store(Protocol):
    url: str

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]: ...
    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]: ...
    def read_bytes(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def put_file(self, key: str, path: Path) -> ObjectInfo: ...
    def put_bytes(self, key: str, data: bytes) -> ObjectInfo: ...
    def delete(self, keys: Iterable[str]) -> list[str]: ...


class ObjectMissing(StoreError):
    """The object was listed but is gone now."""


class ObjectDenied(StoreError):
    """The store refused to read this object (HTTP 403): a credential scoped to part of a prefix.

    identity: who the store says asked, where it says it (its error message, e.g. an ARN) and the
    access key id the request was signed with; never a secret or a signed URL."""

    def __init__(self, what: str, code: str, identity: str) -> None:
        super().__init__(f"{what}: access denied (HTTP 403 {code}); {identity}".rstrip("; "))
        self.code, self.identity = code, identity


class ObjectChanged(StoreError):
    """The object is not what the listing said (a re-read would not help)."""


class _CappedBuffer(io.BytesIO):
    """An in-memory body that refuses to grow past the listed size, so an object replaced by a
    larger one after listing cannot take memory beyond the fetch window."""

    def __init__(self, listed_size: int, what: str) -> None:
        super().__init__()
        self.cap, self.what = listed_size, what

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.cap:
            raise ObjectChanged(f"{self.what}: larger than the {self.cap} bytes listed; the object changed during sync")
        return super().write(data)


def check_key(key: str, *, where: str) -> str:
    """Refuse keys that could escape a local tree (`..`, absolute, empty segments)."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreError(f"{where}: refusing object key {key!r}: expected a relative key without '\\', NUL or a leading '/'")
    segments = key.split("/")
    if any(segment in {"", ".", ".."} for segment in segments):
        raise StoreError(f"{where}: refusing object key {key!r}: '..', '.' or empty path segments could escape the tree")
    return key


def open_store(url: str) -> Store:
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreError(f"{url}: expected s3://bucket/prefix")
        return S3Store(url, parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in {"", "localhost"} or not parsed.path.startswith("/"):
            raise StoreError(f"{url}: expected file:///absolute/path")
        return FileStore(url, Path(parsed.path))
    raise StoreError(f"{url}: unsupported store URL; expected s3://bucket/prefix or file:///absolute/path")


def _hash_stream(chunks: Iterable[bytes], sink: IO[bytes] | None) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, digest.hexdigest()


# --------------------------------------------------------------------------- file://


class FileStore:
    def __init__(self, url: str, root: Path) -> None:
        self.url = url.rstrip("/")
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, where=self.url)

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]:
        base = self.root / prefix.strip("/") if prefix.strip("/") else self.root
        if not base.exists():
            return
        if not base.is_dir():
            raise StoreError(f"{self.url}/{prefix}: expected a directory")
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames.sort()
            for name in filenames:
                path = Path(dirpath) / name
                if path.is_symlink():
                    continue
                stat = path.stat()
                key = path.relative_to(self.root).as_posix()
                found.append(ObjectInfo(key=key, size=stat.st_size, last_modified=str(int(stat.st_mtime))))
        yield from sorted(found, key=lambda info: info.key.encode("utf-8"))

    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]:
        try:
            with open(self._path(key), "rb") as handle:
                return _hash_stream(iter(lambda: handle.read(CHUNK), b""), sink)
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{key}: listed but no longer exists") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{key}: no such object") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)
        return ObjectInfo(key=key, size=target.stat().st_size)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return ObjectInfo(key=key, size=len(data))

    def delete(self, keys: Iterable[str]) -> list[str]:
        deleted = []
        for key in keys:
            path = self._path(key)
            if path.is_file():
                path.unlink()
                deleted.append(key)
        return deleted


# --------------------------------------------------------------------------- s3://


_clients: dict[str | None, object] = {}
_credentials: dict[int, object] = {}  # id(client) -> the botocore credentials it signs with
_clients_lock = threading.Lock()


def s3_client():  # type: ignore[no-untyped-def]
    """One boto3 client per endpoint for the whole process: clients are thread-safe, and each
    costs tens of MB and noticeable CPU to build (a client per thread multiplies both)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    client = _clients.get(endpoint)
    if client is not None:
        return client
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"max_attempts": API_ATTEMPTS, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=64,
            )
            session = boto3.session.Session(botocore_session=_botocore_session())
            region = session.region_name or os.environ.get("AWS_REGION") or "us-east-1"
            client = session.client("s3", region_name=region, config=config)
            client.meta.events.register_first("needs-retry.s3", _slowdown_retry)
            _credentials[id(client)] = session.get_credentials()
            _clients[endpoint] = client
    return client


def _timestamp(value: str):  # type: ignore[no-untyped-def]
    """ISO 8601 timestamps (every listing entry has one) without dateutil's tokenizer, which costs
    a quarter of a millisecond per object; any other form goes to botocore's own parser."""
    from datetime import datetime

    from botocore.utils import parse_timestamp

    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return parse_timestamp(value)
    return parsed if parsed.tzinfo is not None else parse_timestamp(value)


def _botocore_session():  # type: ignore[no-untyped-def]
    import botocore.session

    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
    return core


class HttpStatusError(Exception):
    def __init__(self, status: int, code: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        super().__init__(f"HTTP {status} {code}".rstrip())
        self.status, self.code, self.headers, self.body = status, code, headers or {}, body


def _error_field(body: bytes, name: str) -> str:
    start, end = body.find(b"<%s>" % name.encode()), body.find(b"</%s>" % name.encode())
    return body[start + len(name) + 2:end].decode("utf-8", "replace") if 0 <= start < end else ""


def _identity(client: object, store_message: str) -> str:
    """Whose read was refused: the access key id it was signed with (never the secret) and the
    store's own words when they name a principal (AWS: `User: arn:... is not authorized`)."""
    credentials = _credentials.get(id(client))
    access_key = credentials.get_frozen_credentials().access_key if credentials is not None else None  # type: ignore[attr-defined]
    parts = [f"signed with access key id {access_key}" if access_key else "an anonymous request"]
    if store_message and "Signature" not in store_message:
        parts.append(f"the store says: {store_message[:300]}")
    return "; ".join(parts)


def _error_code(body: bytes) -> str:
    start, end = body.find(b"<Code>"), body.find(b"</Code>")
    return body[start + 6:end].decode("utf-8", "replace") if 0 <= start < end else ""


# --------------------------------------------------------------------------- throttling and clocks


class StoreThrottled(StoreError):
    """The store kept answering SlowDown for longer than the bound allows."""


def slowdown_bound() -> float:
    """Seconds one request may spend waiting out SlowDown answers (RLKEEP_STORE_SLOWDOWN_WAIT)."""
    return seconds_from_env(SLOWDOWN_WAIT_ENV, DEFAULT_SLOWDOWN_WAIT)

def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header (delay seconds or an HTTP date) as seconds from now; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def is_throttle(status: int, code: str) -> bool:
    return code in THROTTLE_CODES or status == 429 or (status == 503 and code in {"", "ServiceUnavailable"})


def throttle_pause(*, waited: float, attempt: int, retry_after: float | None, what: str) -> float:
    """How long to wait before retrying a throttled request: Retry-After when the store gives one,
    else exponential backoff with jitter; raises StoreThrottled once the total would pass the bound."""
    bound = slowdown_bound()
    pause = retry_after if retry_after is not None else min(20.0, 0.5 * 2 ** max(0, attempt - 1)) * random.uniform(0.5, 1)
    if waited + pause > bound:
        asked = f"asks to wait {retry_after:g} s more" if retry_after is not None else "still answers SlowDown"
        raise StoreThrottled(f"{what}: the store {asked} after {attempt} throttled attempts and {waited:.0f} s "
                             f"of waiting, past the {bound:g} s allowed ({SLOWDOWN_WAIT_ENV}); nothing was "
                             "written for this request: rerun later, or raise the bound")
    return pause


def _offset_text(seconds: float) -> str:
    minutes = int(round(abs(seconds) / 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def clock_problem(status: int, code: str, headers: dict[str, str], now: float | None = None) -> str | None:
    """The refusal as a clock problem, with the offset the store's Date header tells, or None.

    RequestTimeTooSkewed always is one; a signature refusal (SignatureDoesNotMatch, an expired
    presigned URL) is one when the store's Date is minutes off this machine's clock.
    """
    if status != 403 or code not in SKEW_CODES:
        return None
    now = time.time() if now is None else now
    date = next((value for key, value in headers.items() if key.lower() == "date"), None)
    try:
        offset = email.utils.parsedate_to_datetime(date).timestamp() - now if date else None
    except (TypeError, ValueError):
        offset = None
    if code != "RequestTimeTooSkewed" and (offset is None or abs(offset) < SKEW_TELLS_SECONDS):
        return None
    if offset is None:
        told = "by an offset the store's answer does not tell (no Date header)"
    else:
        way = "behind" if offset > 0 else "ahead of"
        told = f"{_offset_text(offset)} {way} the store's (the store's Date header says {date})"
    return (f"this machine's clock differs from the store's: it is {told}; the store refused the signed "
            f"request ({code}): S3 refuses requests signed more than 15 minutes off its clock. Set this "
            "machine's clock right (e.g. enable NTP) and rerun")


def _slowdown_retry(response: object = None, attempts: int = 0, request_dict: dict | None = None,
                    **_: object) -> float | None:
    """botocore needs-retry handler, ahead of the standard one: a throttled request is retried after
    the store's Retry-After (or a backoff) for as long as the bound allows, beyond botocore's attempts."""
    if response is None or request_dict is None:
        return None
    http, parsed = response  # type: ignore[misc]
    code = (parsed or {}).get("Error", {}).get("Code", "")
    if not is_throttle(http.status_code, code):
        return None
    context = request_dict.setdefault("context", {})
    waited = float(context.get("rlkeep_throttle_waited", 0.0))
    pause = throttle_pause(waited=waited, attempt=attempts, what=f"HTTP {http.status_code} {code}".strip(),
                           retry_after=retry_after_seconds(http.headers.get("Retry-After")))
    context["rlkeep_throttle_waited"] = waited + pause
    log.warning("store: HTTP %s %s, retrying in %.1f s", http.status_code, code, pause)
    return pause



class _QuerySigner:
    """Presigns GETs of one bucket exactly as botocore would, at a fraction of its CPU.

    botocore resolves everything once, from the standard configuration (endpoint, region,
    addressing style, signature version, credentials): it presigns a probe key, and the probe's
    URL gives the scheme, host, path prefix, the form of signature (SigV2 `Signature=` or SigV4
    `X-Amz-Signature=` in the query) and its scope. Each object's URL is then signed the same way
    (for SigV4 with a signing key cached per day). The signer proves itself on construction:
    re-signing the probe at the probe's own time must give botocore's very signature, or it
    refuses and the caller presigns every GET through botocore as before.
    """

    PROBE = "rlkeep-probe/ä ü+=&~%.txt"
    EXPIRES = 900

    def __init__(self, client: object, credentials: object, bucket: str) -> None:
        from urllib.parse import parse_qsl, urlsplit

        if credentials is None:
            raise ValueError("no credentials: anonymous requests are presigned by botocore")
        self.credentials = credentials
        probe = client.generate_presigned_url(  # type: ignore[attr-defined]
            "get_object", Params={"Bucket": bucket, "Key": self.PROBE}, ExpiresIn=self.EXPIRES)
        parts = urlsplit(probe)
        fields = dict(parse_qsl(parts.query, keep_blank_values=True))
        encoded_probe = _quote_path(self.PROBE)
        if not parts.path.endswith(encoded_probe):
            raise ValueError(f"botocore presigns {parts.path!r}: not the probe key at the end of the path")
        self.scheme, self.host = parts.scheme, parts.netloc
        self.path_prefix = parts.path[: -len(encoded_probe)]
        self._frozen: tuple[float, object] = (0.0, None)
        self._second, self._stamp = -1, ("", "")
        self._keys: dict[tuple[str, str], bytes] = {}
        frozen = credentials.get_frozen_credentials()  # type: ignore[attr-defined]
        if fields.get("X-Amz-Algorithm") == "AWS4-HMAC-SHA256" and fields.get("X-Amz-SignedHeaders") == "host":
            self.version = 4
            access_key, date, self.region, self.service, _ = fields["X-Amz-Credential"].rsplit("/", 4)
            known = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
                     "X-Amz-Security-Token", "X-Amz-Signature"}
            proven = self._v4(self.PROBE, frozen, fields["X-Amz-Date"], date).endswith(fields["X-Amz-Signature"])
        elif {"AWSAccessKeyId", "Signature", "Expires"} <= set(fields):
            self.version = 2
            access_key = fields["AWSAccessKeyId"]
            known = {"AWSAccessKeyId", "Signature", "Expires", "x-amz-security-token"}
            # the string botocore signs names the bucket in the resource whether or not the host does
            proven = False
            for resource_prefix in (self.path_prefix, f"/{bucket}{self.path_prefix}"):
                self.resource_prefix = resource_prefix
                if self._v2(self.PROBE, frozen, int(fields["Expires"])).endswith(f"Signature={_q(fields['Signature'])}"):
                    proven = True
                    break
        else:
            raise ValueError("botocore presigns in a form this signer does not know")
        if set(fields) - known:
            raise ValueError(f"botocore's presigned URL carries parameters this signer does not: {sorted(set(fields) - known)}")
        if access_key != frozen.access_key or not proven:  # type: ignore[attr-defined]
            raise ValueError("re-signing the probe did not reproduce botocore's signature")

    def _frozen_credentials(self) -> object:
        """The credentials as of at most 30 s ago (botocore refreshes expiring ones itself)."""
        fetched, frozen = self._frozen
        now = time.monotonic()
        if frozen is None or now - fetched > 30:
            frozen = self.credentials.get_frozen_credentials()  # type: ignore[attr-defined]
            self._frozen = (now, frozen)
        return frozen

    def _v2(self, key: str, frozen: object, expires: int) -> str:
        """The query of a SigV2 presigned GET (HMAC-SHA1 over method, expiry and resource)."""
        import base64
        import hmac

        token = frozen.token  # type: ignore[attr-defined]
        amz = f"x-amz-security-token:{token}\n" if token else ""
        to_sign = f"GET\n\n\n{expires}\n{amz}{self.resource_prefix}{_quote_path(key)}"
        digest = hmac.new(frozen.secret_key.encode(), to_sign.encode(), hashlib.sha1).digest()  # type: ignore[attr-defined]
        query = f"AWSAccessKeyId={_q(frozen.access_key)}&Expires={expires}"  # type: ignore[attr-defined]
        if token:
            query += f"&x-amz-security-token={_q(token)}"
        return f"{query}&Signature={_q(base64.b64encode(digest).decode())}"

    def _signing_key(self, date: str, secret: str) -> bytes:
        import hmac

        key = self._keys.get((date, secret))
        if key is None:
            key = ("AWS4" + secret).encode()
            for part in (date, self.region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = {(date, secret): key}
        return key

    def _v4(self, key: str, frozen: object, amz_date: str, date: str) -> str:
        """The query of a SigV4 presigned GET of key at amz_date (host the only signed header)."""
        import hmac

        params = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
                  ("X-Amz-Credential", f"{frozen.access_key}/{date}/{self.region}/{self.service}/aws4_request"),  # type: ignore[attr-defined]
                  ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(self.EXPIRES)), ("X-Amz-SignedHeaders", "host")]
        if frozen.token:  # type: ignore[attr-defined]
            params.append(("X-Amz-Security-Token", frozen.token))  # type: ignore[attr-defined]
        query = "&".join(f"{k}={_q(v)}" for k, v in sorted(params))
        canonical = f"GET\n{self.path_prefix}{_quote_path(key)}\n{query}\nhost:{self.host}\n\nhost\nUNSIGNED-PAYLOAD"
        to_sign = (f"AWS4-HMAC-SHA256\n{amz_date}\n{date}/{self.region}/{self.service}/aws4_request\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")
        signature = hmac.new(self._signing_key(date, frozen.secret_key), to_sign.encode(), hashlib.sha256).hexdigest()  # type: ignore[attr-defined]
        return f"{query}&X-Amz-Signature={signature}"

    def target(self, key: str) -> str:
        """The request target (path and query) of a presigned GET of the bucket's key."""
        frozen = self._frozen_credentials()
        second = int(time.time())
        if self.version == 2:
            query = self._v2(key, frozen, second + self.EXPIRES)
        else:
            if second != self._second:
                now = time.gmtime(second)
                self._stamp = (time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now))
                self._second = second
            query = self._v4(key, frozen, *self._stamp)
        return f"{self.path_prefix}{_quote_path(key)}?{query}"


def _q(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="-_.~")


def _quote_path(key: str) -> str:
    from urllib.parse import quote

    return quote(key, safe="/~")


class _BodyEnded(StoreError):
    """The connection ended before the body did (a retry reads the object again)."""


_tls = None


def _tls_context():  # type: ignore[no-untyped-def]
    global _tls
    if _tls is None:
        import ssl

        import certifi

        _tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or certifi.where())
    return _tls


class _Connection:
    """One keep-alive HTTP/1.1 connection, used by one thread: a GET and its response head in a
    few C-level calls (the header parsing of http.client was a seventh of the sync's CPU)."""

    def __init__(self, scheme: str, host: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(f"{scheme}://{host}")
        self.scheme, self.host = scheme, host
        self.address = (parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        self.sock = None
        self.rfile = None

    def close(self) -> None:
        if self.rfile is not None:
            self.rfile.close()
        if self.sock is not None:
            self.sock.close()
        self.sock = self.rfile = None

    def _open(self) -> None:
        import socket

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

    def _send(self, request: bytes) -> bytes:
        assert self.sock is not None and self.rfile is not None
        self.sock.sendall(request)
        status = self.rfile.readline(65537)
        if not status:
            raise ConnectionResetError("the server closed the connection before answering")
        return status

    def get(self, target: str, sink: IO[bytes]) -> tuple[int, int, str]:
        """GET target into sink: (bytes read, Content-Length or -1, sha256). Error statuses raise
        (404: ObjectMissing), with their body read so the connection stays usable."""
        request = (f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\nUser-Agent: rlkeep\r\n"
                   f"Accept-Encoding: identity\r\n\r\n").encode()
        reused = self.sock is not None
        if not reused:
            self._open()
        try:
            try:
                status_line = self._send(request)
            except ConnectionError:
                if not reused:
                    raise
                # a kept-alive connection the server closed while idle: once more on a new one
                self.close()
                self._open()
                status_line = self._send(request)
            return self._response(status_line, sink)
        except BaseException:
            self.close()
            raise

    def _response(self, status_line: bytes, sink: IO[bytes]) -> tuple[int, int, str]:
        assert self.rfile is not None
        rfile = self.rfile
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise _BodyEnded(f"not an HTTP response: {status_line[:80]!r}")
        status = int(parts[1])
        length, chunked, close = -1, False, parts[0] == b"HTTP/1.0"
        headers: dict[str, str] = {}  # kept for errors only (Retry-After, Date)
        while True:
            line = rfile.readline(65537)
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise _BodyEnded("the connection ended inside the response headers")
            raw_name, _, value = line.partition(b":")
            name = raw_name.strip().lower()
            if status != 200:
                headers[raw_name.strip().decode("latin-1")] = value.strip().decode("latin-1")
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if status != 200:
            body = b"".join(self._chunks(length, chunked))
            if close:
                self.close()
            if status == 404:
                raise ObjectMissing("no such object")
            raise HttpStatusError(status, _error_code(body), headers, body)
        size, digest = _hash_stream(self._chunks(length, chunked), sink)
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
                    raise _BodyEnded(f"body ended after {length - left} of {length} bytes")
                left -= len(chunk)
                yield chunk


_local = threading.local()


def _connection(scheme: str, host: str) -> _Connection:
    """This thread's connection to host (one per thread: no pool lock on the hot path)."""
    connections = getattr(_local, "connections", None)
    if connections is None:
        connections = _local.connections = {}
    connection = connections.get((scheme, host))
    if connection is None:
        connection = connections[(scheme, host)] = _Connection(scheme, host)
    return connection


_signers: dict[tuple[int, str], _QuerySigner | None] = {}


def _signer(client: object, bucket: str) -> _QuerySigner | None:
    """The bucket's query signer for this client, or None where botocore must presign each GET."""
    key = (id(client), bucket)
    if key not in _signers:
        with _clients_lock:
            if key not in _signers:
                try:
                    _signers[key] = _QuerySigner(client, _credentials.get(id(client)), bucket)
                except (ValueError, KeyError, AttributeError):
                    _signers[key] = None
    return _signers[key]


def _retryable(error: Exception) -> bool:
    from botocore.exceptions import (
        ClientError,
        ConnectionError as BotoConnectionError,
        HTTPClientError,
        IncompleteReadError,
        ResponseStreamingError,
    )
    from urllib3.exceptions import ProtocolError

    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = error.response.get("Error", {}).get("Code", "")
        return status >= 500 or code in {"SlowDown", "Throttling", "RequestTimeout", "InternalError"}
    if isinstance(error, HttpStatusError):
        return error.status >= 500 or error.status in {408, 429}
    return isinstance(error, (Urllib3Error, BotoConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError, ProtocolError, OSError))


def _cause_of(error: BaseException, kind: type) -> BaseException | None:
    """The first exception of `kind` in the chain (s3transfer wraps what a handler raised)."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 16:
        if isinstance(current, kind):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


def _is_missing(error: Exception) -> bool:
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in {"NoSuchKey", "404", "NotFound"} or status == 404
    return False


def _clock_problem_of(error: Exception) -> str | None:
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        metadata = error.response.get("ResponseMetadata", {})
        return clock_problem(int(metadata.get("HTTPStatusCode", 0)), error.response.get("Error", {}).get("Code", ""),
                             dict(metadata.get("HTTPHeaders", {})))
    if isinstance(error, HttpStatusError):
        return clock_problem(error.status, error.code, error.headers)
    return None


def _denied(error: Exception) -> tuple[str, str] | None:
    """(code, the store's message) of a 403 from botocore, else None."""
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError) and error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403:
        details = error.response.get("Error", {})
        return str(details.get("Code") or "AccessDenied"), str(details.get("Message") or "")
    if isinstance(error, HttpStatusError) and error.status == 403:
        return error.code or "AccessDenied", _error_field(error.body, "Message")
    return None


def _describe_error(error: Exception) -> str:
    text = str(error)
    return text if len(text) < 300 else text[:300] + "..."


class S3Store:
    def __init__(self, url: str, bucket: str, prefix: str) -> None:
        self.url = url.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix

    def _full(self, key: str) -> str:
        check_key(key, where=self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, what: str, action: Callable[[], object]) -> object:
        """One API call; botocore already retried throttling, 5xx and connection errors."""
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - classified below
            if _is_missing(error):
                raise ObjectMissing(f"{what}: no such object") from None
            clock = _clock_problem_of(error)
            if clock is not None:
                raise StoreError(f"{what}: {clock}") from None
            throttled = _cause_of(error, StoreThrottled)
            if throttled is not None:
                raise StoreThrottled(f"{what}: {throttled}") from None
            attempts = API_ATTEMPTS if _retryable(error) else 1
            raise StoreError(f"{what}: failed after {attempts} attempts: {_describe_error(error)}") from None

    def list(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectInfo]:
        full_prefix = "/".join(p for p in (self.prefix, prefix.strip("/")) if p)
        if full_prefix:
            full_prefix += "/"
        root_len = len(self.prefix) + 1 if self.prefix else 0
        token: str | None = None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": full_prefix, "MaxKeys": page_size}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(
                f"{self.url}: listing {prefix or '/'}",
                lambda: s3_client().list_objects_v2(**kwargs),
            )
            for entry in page.get("Contents", []):  # type: ignore[union-attr]
                key = entry["Key"][root_len:]
                if key.endswith("/") and entry["Size"] == 0:
                    continue  # a "folder" marker some tools create
                check_key(key, where=f"{self.url} listing")
                yield ObjectInfo(
                    key=key,
                    size=int(entry["Size"]),
                    etag=entry.get("ETag", "").strip('"') or None,
                    last_modified=entry["LastModified"].isoformat() if entry.get("LastModified") else None,
                )
            if not page.get("IsTruncated"):  # type: ignore[union-attr]
                return
            token = page["NextContinuationToken"]  # type: ignore[index]

    def read_into(self, key: str, sink: IO[bytes]) -> tuple[int, str]:
        """Stream one object into sink; a broken body restarts from the beginning.

        The sink must be rewindable (seek/truncate) for a retry to be clean: callers pass a
        BytesIO or a temp file, never a half-written tar.
        """
        full = self._full(key)
        what = f"{self.url}/{key}"
        attempt, throttles, throttled_wait = 0, 0, 0.0
        while attempt < READ_ATTEMPTS:
            start = sink.tell()
            try:
                size, expected, digest = self._get(full, sink)
                if expected >= 0 and size != expected:
                    raise StoreError(f"{what}: body ended after {size} of {expected} bytes")
                return size, digest
            except ObjectMissing:
                raise ObjectMissing(f"{what}: listed but no longer exists") from None
            except ObjectChanged:
                sink.seek(start)
                sink.truncate()
                raise
            except Exception as error:  # noqa: BLE001
                sink.seek(start)
                sink.truncate()
                if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise  # the local disk is full: no retry helps; the step names the full path
                if _is_missing(error):
                    raise ObjectMissing(f"{what}: listed but no longer exists") from None
                clock = _clock_problem_of(error)
                if clock is not None:
                    raise StoreError(f"{what}: {clock}") from None
                if isinstance(error, HttpStatusError) and is_throttle(error.status, error.code):
                    # SlowDown: not a failed attempt; wait as the store asks, within the bound
                    throttles += 1
                    pause = throttle_pause(waited=throttled_wait, attempt=throttles, what=f"{what}: read",
                                           retry_after=retry_after_seconds(error.headers.get("Retry-After")))
                    throttled_wait += pause
                    time.sleep(pause)
                    continue
                denied = _denied(error)
                if denied is not None:
                    raise ObjectDenied(what, denied[0], _identity(s3_client(), denied[1])) from None
                transient = isinstance(error, StoreError) or _retryable(error)
                if not transient or attempt == READ_ATTEMPTS - 1:
                    raise StoreError(f"{what}: read failed after {attempt + 1} attempts: {_describe_error(error)}") from None
                time.sleep(min(8.0, 0.2 * 2**attempt))
                attempt += 1
        raise AssertionError("unreachable")

    def _get(self, full_key: str, sink: IO[bytes]) -> tuple[int, int, str]:
        """GET one object into sink: (bytes read, Content-Length, sha256).

        The default path presigns the request (the signature in the query, as botocore would
        presign it: _QuerySigner) and sends it on this thread's keep-alive connection
        (_Connection): a fraction of get_object's client CPU, which dominates when syncing many
        small objects. RLKEEP_S3_PRESIGNED_GET=0 falls back to get_object (e.g. behind a proxy).
        """
        if os.environ.get("RLKEEP_S3_PRESIGNED_GET", "1") == "0":
            response = s3_client().get_object(Bucket=self.bucket, Key=full_key)
            try:
                size, digest = _hash_stream(response["Body"].iter_chunks(CHUNK), sink)
            except BaseException:
                response["Body"].close()  # an unread body must not return to the pool
                raise
            return size, int(response.get("ContentLength", -1)), digest
        client = s3_client()
        signer = _signer(client, self.bucket)
        if signer is not None:
            return _connection(signer.scheme, signer.host).get(signer.target(full_key), sink)
        from urllib.parse import urlsplit

        parts = urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": full_key},
                                                       ExpiresIn=900))
        return _connection(parts.scheme, parts.netloc).get(f"{parts.path}?{parts.query}", sink)

    def read_bytes(self, key: str) -> bytes:
        import io

        buffer = io.BytesIO()
        self.read_into(key, buffer)
        return buffer.getvalue()

    def exists(self, key: str) -> bool:
        try:
            self._call(f"{self.url}/{key}", lambda: s3_client().head_object(Bucket=self.bucket, Key=self._full(key)))
            return True
        except ObjectMissing:
            return False

    def head(self, key: str) -> ObjectInfo:
        response = self._call(f"{self.url}/{key}", lambda: s3_client().head_object(Bucket=self.bucket, Key=self._full(key)))
        return ObjectInfo(key=key, size=int(response["ContentLength"]), etag=response.get("ETag", "").strip('"'))  # type: ignore[index]

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        """Upload one file (in parts above MULTIPART_BYTES). Parts an interrupted upload of this very
        key left behind are aborted before and after: they are invisible, but stored and billed."""
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES,
                                max_concurrency=4)
        multipart = path.stat().st_size >= MULTIPART_BYTES
        if multipart:
            self.abort_unfinished_uploads(key)
        try:
            self._call(
                f"{self.url}/{key}: upload",
                lambda: s3_client().upload_file(str(path), self.bucket, self._full(key), Config=config),
            )
        finally:
            if multipart:
                self.abort_unfinished_uploads(key)
        # Not a HEAD: a store with read-after-write lag may not show the object yet (verification
        # re-checks, within its bound); the store took the upload, so this is what it holds.
        return ObjectInfo(key=key, size=path.stat().st_size)

    def unfinished_uploads(self, key: str) -> list[str]:
        """Upload ids of multipart uploads in progress for exactly this key (no other key's)."""
        full = self._full(key)
        ids: list[str] = []
        kwargs: dict[str, str] = {"Bucket": self.bucket, "Prefix": full}
        while True:
            page = self._call(f"{self.url}/{key}: listing unfinished multipart uploads",
                              lambda: s3_client().list_multipart_uploads(**kwargs))
            uploads = page.get("Uploads", [])  # type: ignore[union-attr]
            ids += [upload["UploadId"] for upload in uploads if upload.get("Key") == full]
            if not page.get("IsTruncated"):  # type: ignore[union-attr]
                return ids
            kwargs["KeyMarker"] = page["NextKeyMarker"]  # type: ignore[index]
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]  # type: ignore[index]

    def abort_unfinished_uploads(self, key: str) -> int:
        """Abort this key's multipart uploads in progress (a killed upload's parts); best effort:
        a store that refuses to list them is logged, and the upload goes on."""
        try:
            ids = self.unfinished_uploads(key)
            for upload_id in ids:
                self._call(f"{self.url}/{key}: aborting multipart upload {upload_id}",
                           lambda: s3_client().abort_multipart_upload(Bucket=self.bucket, Key=self._full(key),
                                                                      UploadId=upload_id))
        except StoreError as error:
            log.warning("%s", error)
            return 0
        if ids:
            log.info("%s/%s: aborted %d unfinished multipart upload(s) an interrupted upload left", self.url, key, len(ids))
        return len(ids)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        self._call(
            f"{self.url}/{key}: upload",
            lambda: s3_client().put_object(Bucket=self.bucket, Key=self._full(key), Body=data),
        )
        return ObjectInfo(key=key, size=len(data))

    def delete(self, keys: Iterable[str]) -> list[str]:
        deleted: list[str] = []
        batch: list[str] = []

        def flush() -> None:
            if not batch:
                return
            objects = [{"Key": self._full(key)} for key in batch]
            response = self._call(
                f"{self.url}: delete {len(batch)} objects",
                lambda: s3_client().delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": False}),
            )
            errors = response.get("Errors", [])  # type: ignore[union-attr]
            if errors:
                first = errors[0]
                raise StoreError(f"{self.url}: delete refused for {len(errors)} objects, e.g. {first.get('Key')}: {first.get('Code')}")
            deleted.extend(batch)
            batch.clear()

        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                flush()
        flush()
        return deleted


def bucket_location(url: str) -> tuple[str | None, str]:
    """(region, how it was found) of an s3:// URL's bucket, asked of the store (GetBucketLocation).

    An empty answer is not read as us-east-1 (AWS's convention) because other S3 servers, e.g.
    SeaweedFS, answer empty too: the region is then unknown, and the text says why.
    """
    store = open_store(url)
    if not isinstance(store, S3Store):
        return None, f"{url}: not an s3:// store, it has no bucket location"
    try:
        response = s3_client().get_bucket_location(Bucket=store.bucket)
    except Exception as error:  # noqa: BLE001 - any refusal leaves the region unknown, with the reason
        return None, f"GetBucketLocation of bucket {store.bucket} failed: {_describe_error(error)}"
    region = response.get("LocationConstraint")
    if not isinstance(region, str) or not region.strip():
        return None, f"GetBucketLocation of bucket {store.bucket} answered empty"
    return region.strip(), f"GetBucketLocation of bucket {store.bucket}"


# --------------------------------------------------------------------------- bulk reads


BATCH_OBJECTS = 16  # small objects fetched back to back by one worker: one hand-off per batch
BATCH_BYTES = 1 << 20


def _batches(infos: Iterable[ObjectInfo], most: int = BATCH_OBJECTS) -> Iterator[list[ObjectInfo]]:
    """Consecutive runs of small objects (up to `most` and BATCH_BYTES); large objects alone."""
    batch: list[ObjectInfo] = []
    size = 0
    for info in infos:
        if batch and (len(batch) == most or size + info.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(info)
        size += info.size
    if batch:
        yield batch


def fetch_in_order(
    store: Store,
    infos: Iterable[ObjectInfo],
    *,
    workers: int = 16,
    max_inflight_bytes: int = 128 << 20,
    spill_bytes: int = 16 << 20,
) -> Iterator[FetchedObject]:
    """Fetch many objects concurrently and yield them in the given order.

    At most `workers` requests run at once and at most `max_inflight_bytes` (by listed size)
    wait to be consumed; each body lives in memory up to `spill_bytes` and on disk beyond,
    so memory is bounded by the concurrency, not by the object count or the largest object.
    Small objects go to the workers in batches: with thousands of 1-50 KB objects, handing
    each one to a thread and back costs as much CPU as its request.
    The consumer closes each FetchedObject when done with it.
    """
    import tempfile

    def fetch(info: ObjectInfo) -> FetchedObject:
        body: IO[bytes]
        if info.size <= spill_bytes:
            body = _CappedBuffer(info.size, f"{store.url}/{info.key}")
        else:
            body = tempfile.SpooledTemporaryFile(max_size=spill_bytes)  # type: ignore[assignment]
        try:
            size, digest = store.read_into(info.key, body)
        except ObjectMissing:
            body.close()
            return FetchedObject(info, None, None)
        except ObjectDenied as denied:
            body.close()
            return FetchedObject(info, None, None, denied)
        except BaseException:
            body.close()
            raise
        if size != info.size:
            body.close()
            raise StoreError(f"{store.url}/{info.key}: listed with {info.size} bytes but read {size}; the object changed during sync")
        body.seek(0)
        return FetchedObject(info, body, digest)

    def fetch_batch(batch: list[ObjectInfo]) -> list[FetchedObject]:
        done: list[FetchedObject] = []
        try:
            for info in batch:
                done.append(fetch(info))
        except BaseException:
            for fetched in done:
                fetched.close()
            raise
        return done

    pending: deque[tuple[int, Future[list[FetchedObject]]]] = deque()
    inflight = 0
    # a short list is cut finer, so that every worker has a batch (all requests in flight at once)
    most = max(1, min(BATCH_OBJECTS, len(infos) // workers)) if isinstance(infos, list) else BATCH_OBJECTS
    source = _batches(infos, most)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
        try:
            exhausted = False
            while True:
                while not exhausted and len(pending) < workers * 2 and (inflight < max_inflight_bytes or not pending):
                    batch = next(source, None)
                    if batch is None:
                        exhausted = True
                        break
                    size = sum(info.size for info in batch)
                    pending.append((size, pool.submit(fetch_batch, batch)))
                    inflight += size
                if not pending:
                    return
                size, future = pending.popleft()
                results = future.result()
                inflight -= size
                for index, result in enumerate(results):
                    try:
                        yield result
                    except BaseException:  # the consumer stopped: close what it will never see
                        for later in results[index + 1:]:
                            later.close()
                        raise
        finally:
            for _, future in pending:
                if not future.cancel() and future.done() and future.exception() is None:
                    for fetched in future.result():
                        fetched.close()


def upload_tree(root: Path, store: Store, *, workers: int = 16) -> int:
    """Copy every file under root to the store under the same relative keys; returns the count."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda path: store.put_file(path.relative_to(root).as_posix(), path), files))
    return len(files)
