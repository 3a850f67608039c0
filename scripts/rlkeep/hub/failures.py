"""What a failed Hub call says: one line about the failure (no query strings: LFS upload URLs
carry signatures), and `hub_step`, which turns a Hub or network failure into an RlkeepError naming
the repo and the step, with the token scrubbed.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
from huggingface_hub.errors import HfHubHTTPError

from rlkeep.diskspace import is_no_space
from rlkeep.errors import RlkeepError, TransientError
from rlkeep.hub.calls import hub_call_of
from rlkeep.hub.ratelimits import HubRateLimited
from rlkeep.hub.target import HubTarget

HUB_FAILURES = (OSError, ValueError, RuntimeError, httpx2.HTTPError)


class HubUnavailable(TransientError):
    """A 5xx or a network failure outlasted the client's own retries: the step tries again."""


def is_transient(error: BaseException) -> bool:
    """A Hub answer another try may change: a 5xx, or no answer at all (connection, timeout)."""
    http_error = _innermost_http_error(error)
    if http_error is not None:
        return http_error.response.status_code >= 500
    current: BaseException | None = error
    for _ in range(16):
        if current is None:
            return False
        if isinstance(current, (httpx2.TransportError, ConnectionError, TimeoutError)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _innermost_http_error(error: BaseException) -> HfHubHTTPError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, HfHubHTTPError) and getattr(current, "response", None) is not None:
            return current
        current = current.__cause__ or current.__context__
    return None


def describe_hub_error(error: BaseException) -> str:
    """One line about what failed, without query strings (LFS upload URLs carry signatures)."""
    http_error = _innermost_http_error(error)
    if http_error is None:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    response = http_error.response
    request = response.request
    path = request.url.path
    server = response.headers.get("X-Error-Message") or http_error.server_message or ""
    detail = f"HTTP {response.status_code} on {request.method} {path} ({hub_call_of(request.method, path)})"
    return f"{detail}: {server.strip()}" if server.strip() else detail


@contextmanager
def hub_step(target: HubTarget, repo_type: str, repo_id: str, step: str, note: str = "") -> Iterator[None]:
    """Turn a Hub or network failure into an RlkeepError naming the repo and the step."""
    try:
        yield
    except HubRateLimited as error:
        raise RlkeepError(target.scrub(f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: "
                                       f"{error}")) from None
    except RlkeepError:
        raise
    except HUB_FAILURES as error:
        limited = _rate_limited_cause(error)
        if limited is not None:  # raised inside the client's worker threads, wrapped there
            raise RlkeepError(target.scrub(f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: "
                                           f"{limited}")) from None
        full = _local_disk_full(error)
        if full is not None:
            raise full from None  # our disk, not the Hub: the step says which path is full (runner.run_step)
        message = f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: {describe_hub_error(error)}"
        if note:
            message += f". {note}"
        raise (HubUnavailable if is_transient(error) else RlkeepError)(target.scrub(message)) from None


def _rate_limited_cause(error: BaseException | None) -> HubRateLimited | None:
    seen = 0
    while error is not None and seen < 16:
        if isinstance(error, HubRateLimited):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _local_disk_full(error: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT error in an exception chain (a download ran out of local space), if any."""

    seen = 0
    while error is not None and seen < 16:
        if is_no_space(error):
            return error  # type: ignore[return-value]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def status_of(error: BaseException) -> int | None:
    http_error = _innermost_http_error(error)
    return http_error.response.status_code if http_error is not None else None
