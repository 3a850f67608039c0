"""How a store request fails, and what rlkeep does about it: SlowDown and other throttling
(waited out within RLKEEP_STORE_SLOWDOWN_WAIT, Retry-After honoured), a clock too far off the
store's (told with the offset, never retried), and the classification of any other error as
missing, denied, retryable or final, with a short description for the message.

botocore and urllib3 are imported inside the classifiers: they cost about 0.1 s to import, and
planning imports rlkeep.storage (through rlkeep.regions) without ever talking to a store.
"""
from __future__ import annotations

import email.utils
import logging
import random
import time

from rlkeep.errors import StoreError, TransientError
from rlkeep.waits import seconds_from_env

log = logging.getLogger(__name__)

SLOWDOWN_WAIT_ENV = "RLKEEP_STORE_SLOWDOWN_WAIT"
DEFAULT_SLOWDOWN_WAIT = 300.0  # seconds one request may spend waiting out SlowDown answers
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                            "TooManyRequests", "RequestThrottled"})
SKEW_CODES = frozenset({"RequestTimeTooSkewed", "SignatureDoesNotMatch", "RequestExpired", "AccessDenied"})
SKEW_TELLS_SECONDS = 300  # a Date header this far off ours makes a signature refusal a clock problem


class HttpStatusError(Exception):
    """An error status of a GET rlkeep sent itself (rlkeep.storage.connection), with its headers and body."""

    def __init__(self, status: int, code: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        super().__init__(f"HTTP {status} {code}".rstrip())
        self.status, self.code, self.headers, self.body = status, code, headers or {}, body


def error_field(body: bytes, name: str) -> str:
    """The text of element `name` in an S3 error body, or empty."""
    start, end = body.find(b"<%s>" % name.encode()), body.find(b"</%s>" % name.encode())
    return body[start + len(name) + 2:end].decode("utf-8", "replace") if 0 <= start < end else ""


# --------------------------------------------------------------------------- throttling and clocks


class StoreThrottled(StoreError):
    """The store kept answering SlowDown for longer than the bound allows (permanent for this run:
    the bound was the retry; rerun later)."""


class StoreUnavailable(StoreError, TransientError):
    """A 5xx, a timeout or a broken connection outlasted botocore's and rlkeep's request retries:
    the step tries again (rlkeep.runner.run_step)."""


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


def slowdown_retry(response: object = None, attempts: int = 0, request_dict: dict | None = None,
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


# --------------------------------------------------------------------------- classification


def is_retryable(error: Exception) -> bool:
    """A failure another attempt may cure: 5xx, throttling, timeouts, broken connections."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError as BotoConnectionError,
        HTTPClientError,
        IncompleteReadError,
        ResponseStreamingError,
    )
    from urllib3.exceptions import HTTPError as Urllib3Error, ProtocolError

    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = error.response.get("Error", {}).get("Code", "")
        return status >= 500 or code in {"SlowDown", "Throttling", "RequestTimeout", "InternalError"}
    if isinstance(error, HttpStatusError):
        return error.status >= 500 or error.status in {408, 429}
    return isinstance(error, (Urllib3Error, BotoConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError, ProtocolError, OSError))


def cause_of(error: BaseException, kind: type) -> BaseException | None:
    """The first exception of `kind` in the chain (s3transfer wraps what a handler raised)."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 16:
        if isinstance(current, kind):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


def is_missing(error: Exception) -> bool:
    """botocore's answer for an object that is not there (NoSuchKey, 404)."""
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in {"NoSuchKey", "404", "NotFound"} or status == 404
    return False


def clock_problem_of(error: Exception) -> str | None:
    """clock_problem of a botocore or rlkeep HTTP error, or None."""
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        metadata = error.response.get("ResponseMetadata", {})
        return clock_problem(int(metadata.get("HTTPStatusCode", 0)), error.response.get("Error", {}).get("Code", ""),
                             dict(metadata.get("HTTPHeaders", {})))
    if isinstance(error, HttpStatusError):
        return clock_problem(error.status, error.code, error.headers)
    return None


def denied_by_store(error: Exception) -> tuple[str, str] | None:
    """(code, the store's message) of a 403 (botocore's or a presigned GET's), else None."""
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError) and error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403:
        details = error.response.get("Error", {})
        return str(details.get("Code") or "AccessDenied"), str(details.get("Message") or "")
    if isinstance(error, HttpStatusError) and error.status == 403:
        return error.code or "AccessDenied", error_field(error.body, "Message")
    return None


class WorldError(StoreError):
    """The store as the record names it cannot be reached as it is: its bucket does not exist, the
    credentials are missing or refused, or its endpoint does not answer. `cause` is one of
    WORLD_CAUSES, `url` the store URL asked, the message what was seen; rlkeep.world says it in the
    record's words."""

    def __init__(self, cause: str, url: str, seen: str) -> None:
        super().__init__(seen)
        self.cause, self.url = cause, url


class WorldUnanswered(WorldError, StoreUnavailable):
    """The endpoint did not answer: transient, so the step tries again before it blocks."""


WORLD_CAUSES = ("no_bucket", "no_credentials", "credentials_refused", "no_answer")
REFUSED_CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch"})


def world_error(error: Exception, url: str, what: str) -> WorldError | None:
    """The error as a WorldError (what was seen, for `what`), or None when it is no such cause.
    Called after clock_problem_of: a signature refusal that is a clock problem is told as that."""
    from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError

    if isinstance(error, NoCredentialsError):
        return WorldError("no_credentials", url, f"{what}: no credentials to sign with ({error})")
    if isinstance(error, (EndpointConnectionError, ConnectTimeoutError)):
        return WorldUnanswered("no_answer", url, f"{what}: the endpoint did not answer "
                               f"({describe_error(error)})")
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return WorldError("no_bucket", url, f"{what}: the store answered NoSuchBucket")
        if code in REFUSED_CREDENTIAL_CODES:
            return WorldError("credentials_refused", url, f"{what}: the store refused the credentials ({code})")
    return None


def describe_error(error: Exception) -> str:
    """The error's text, cut at 300 characters for a message."""
    text = str(error)
    return text if len(text) < 300 else text[:300] + "..."
