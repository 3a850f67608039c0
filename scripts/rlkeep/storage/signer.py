"""Presigned requests at a fraction of botocore's CPU: QuerySigner signs each object's URL exactly
as botocore would (SigV2 or SigV4 in the query), and proves it on construction against botocore's
own presigned URLs; query_signer keeps one per client and bucket, or None where botocore must
presign every request itself."""
from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import parse_qsl, quote, urlsplit

from rlkeep.storage.client import clients_lock, credentials_of


class MethodNotOffered(ValueError):
    """A presigned request of a method the signer does not (or no longer does) offer."""


class QuerySigner:
    """Presigns GETs and PUTs of one bucket exactly as botocore would, at a fraction of its CPU.

    botocore resolves everything once, from the standard configuration (endpoint, region,
    addressing style, signature version, credentials): it presigns a probe key, and the probe's
    URL gives the scheme, host, path prefix, the form of signature (SigV2 `Signature=` or SigV4
    `X-Amz-Signature=` in the query) and its scope. Each object's URL is then signed the same way
    (for SigV4 with a signing key cached per day). The signer proves itself on construction:
    re-signing the probe at the probe's own time must give botocore's very signature, or it
    refuses and the caller presigns every GET through botocore as before.

    PUTs are signed with their Content-MD5, as botocore presigns `put_object` given ContentMD5, so
    the store checks the body that arrived; they are offered (`methods`) only where re-signing
    botocore's presigned PUT of the probe reproduces it whole.
    """

    PROBE = "rlkeep-probe/ä ü+=&~%.txt"
    EXPIRES = 900

    def __init__(self, client: object, credentials: object, bucket: str) -> None:
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
            proven = self._v4(self.PROBE, frozen, fields["X-Amz-Date"], date, "GET", "").endswith(
                fields["X-Amz-Signature"])
        elif {"AWSAccessKeyId", "Signature", "Expires"} <= set(fields):
            self.version = 2
            access_key = fields["AWSAccessKeyId"]
            known = {"AWSAccessKeyId", "Signature", "Expires", "x-amz-security-token"}
            # the string botocore signs names the bucket in the resource whether or not the host does
            proven = False
            for resource_prefix in (self.path_prefix, f"/{bucket}{self.path_prefix}"):
                self.resource_prefix = resource_prefix
                if self._v2(self.PROBE, frozen, int(fields["Expires"]), "GET", "").endswith(
                        f"Signature={_q(fields['Signature'])}"):
                    proven = True
                    break
        else:
            raise ValueError("botocore presigns in a form this signer does not know")
        if set(fields) - known:
            raise ValueError(f"botocore's presigned URL carries parameters this signer does not: {sorted(set(fields) - known)}")
        if access_key != frozen.access_key or not proven:  # type: ignore[attr-defined]
            raise ValueError("re-signing the probe did not reproduce botocore's signature")
        self.methods = frozenset({"GET", "PUT"} if self._put_proven(client, bucket, frozen) else {"GET"})

    PROBE_MD5 = "1B2M2Y8AsgTpgAmY7PhCfg=="  # of no bytes

    def _put_proven(self, client: object, bucket: str, frozen: object) -> bool:
        """Whether re-signing botocore's presigned PUT of the probe (with a Content-MD5) gives its very URL."""
        botocore_url = urlsplit(client.generate_presigned_url(  # type: ignore[attr-defined]
            "put_object", Params={"Bucket": bucket, "Key": self.PROBE, "ContentMD5": self.PROBE_MD5},
            ExpiresIn=self.EXPIRES))
        fields = dict(parse_qsl(botocore_url.query, keep_blank_values=True))
        try:
            if self.version == 2:
                query = self._v2(self.PROBE, frozen, int(fields["Expires"]), "PUT", self.PROBE_MD5)
            else:
                date = fields["X-Amz-Credential"].rsplit("/", 4)[1]
                query = self._v4(self.PROBE, frozen, fields["X-Amz-Date"], date, "PUT", self.PROBE_MD5)
        except (KeyError, IndexError, ValueError):
            return False
        ours = f"{self.scheme}://{self.host}{self.path_prefix}{_quote_path(self.PROBE)}"
        return (ours == f"{botocore_url.scheme}://{botocore_url.netloc}{botocore_url.path}"
                and dict(parse_qsl(query, keep_blank_values=True)) == fields)

    def _frozen_credentials(self) -> object:
        """The credentials as of at most 30 s ago (botocore refreshes expiring ones itself)."""
        fetched, frozen = self._frozen
        now = time.monotonic()
        if frozen is None or now - fetched > 30:
            frozen = self.credentials.get_frozen_credentials()  # type: ignore[attr-defined]
            self._frozen = (now, frozen)
        return frozen

    def _v2(self, key: str, frozen: object, expires: int, method: str, content_md5: str) -> str:
        """The query of a SigV2 presigned request (HMAC-SHA1 over method, Content-MD5, expiry and
        resource); botocore also names the Content-MD5 in the query."""
        token = frozen.token  # type: ignore[attr-defined]
        amz = f"x-amz-security-token:{token}\n" if token else ""
        to_sign = f"{method}\n{content_md5}\n\n{expires}\n{amz}{self.resource_prefix}{_quote_path(key)}"
        digest = hmac.new(frozen.secret_key.encode(), to_sign.encode(), hashlib.sha1).digest()  # type: ignore[attr-defined]
        query = f"AWSAccessKeyId={_q(frozen.access_key)}&Expires={expires}"  # type: ignore[attr-defined]
        if token:
            query += f"&x-amz-security-token={_q(token)}"
        if content_md5:
            query += f"&content-md5={_q(content_md5)}"
        return f"{query}&Signature={_q(base64.b64encode(digest).decode())}"

    def _signing_key(self, date: str, secret: str) -> bytes:
        key = self._keys.get((date, secret))
        if key is None:
            key = ("AWS4" + secret).encode()
            for part in (date, self.region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = {(date, secret): key}
        return key

    def _v4(self, key: str, frozen: object, amz_date: str, date: str, method: str, content_md5: str) -> str:
        """The query of a SigV4 presigned request for key at amz_date: the signed headers are the
        host and, when given, Content-MD5; the payload is unsigned."""
        signed = "content-md5;host" if content_md5 else "host"
        headers = f"content-md5:{content_md5}\nhost:{self.host}\n" if content_md5 else f"host:{self.host}\n"
        params = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
                  ("X-Amz-Credential", f"{frozen.access_key}/{date}/{self.region}/{self.service}/aws4_request"),  # type: ignore[attr-defined]
                  ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(self.EXPIRES)), ("X-Amz-SignedHeaders", signed)]
        if frozen.token:  # type: ignore[attr-defined]
            params.append(("X-Amz-Security-Token", frozen.token))  # type: ignore[attr-defined]
        query = "&".join(f"{k}={_q(v)}" for k, v in sorted(params))
        canonical = f"{method}\n{self.path_prefix}{_quote_path(key)}\n{query}\n{headers}\n{signed}\nUNSIGNED-PAYLOAD"
        to_sign = (f"AWS4-HMAC-SHA256\n{amz_date}\n{date}/{self.region}/{self.service}/aws4_request\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")
        signature = hmac.new(self._signing_key(date, frozen.secret_key), to_sign.encode(), hashlib.sha256).hexdigest()  # type: ignore[attr-defined]
        return f"{query}&X-Amz-Signature={signature}"

    def refuse_puts(self) -> bool:
        """Offer no more PUTs (the store refused one's signature though botocore would have signed it
        so); whether they were offered until now."""
        offered = "PUT" in self.methods
        self.methods = self.methods - {"PUT"}
        return offered

    def target(self, key: str, method: str = "GET", content_md5: str = "") -> str:
        """The request target (path and query) of a presigned request for the bucket's key; `method`
        one of `methods`, a PUT with the Content-MD5 header it will carry."""
        if method not in self.methods:
            raise MethodNotOffered(f"{method} requests are not proven to sign as botocore would, or the store refused them")
        frozen = self._frozen_credentials()
        second = int(time.time())
        if self.version == 2:
            query = self._v2(key, frozen, second + self.EXPIRES, method, content_md5)
        else:
            if second != self._second:
                now = time.gmtime(second)
                self._stamp = (time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now))
                self._second = second
            query = self._v4(key, frozen, *self._stamp, method, content_md5)
        return f"{self.path_prefix}{_quote_path(key)}?{query}"


def _q(value: str) -> str:
    """A query value as SigV2/SigV4 encode it."""
    return quote(value, safe="-_.~")


def _quote_path(key: str) -> str:
    """An object key as the URL path botocore presigns."""
    return quote(key, safe="/~")


_signers: dict[tuple[int, str], QuerySigner | None] = {}


def query_signer(client: object, bucket: str) -> QuerySigner | None:
    """The bucket's query signer for this client, or None where botocore must presign each GET."""
    key = (id(client), bucket)
    if key not in _signers:
        with clients_lock:
            if key not in _signers:
                try:
                    _signers[key] = QuerySigner(client, credentials_of(client), bucket)
                except (ValueError, KeyError, AttributeError):
                    _signers[key] = None
    return _signers[key]
