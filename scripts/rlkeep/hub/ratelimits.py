"""Rate limits (HTTP 429): every huggingface_hub request of this process goes through
RateLimitTransport, which waits out 429 answers within a bounded total wait per request
(RLKEEP_HUB_RATE_LIMIT_WAIT) and then stops with HubRateLimited.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import httpx2
from huggingface_hub import get_session, set_client_factory

from rlkeep.hub.failures import HubRateLimited, hub_call_of
from rlkeep.storage import retry_after_seconds
from rlkeep.waits import seconds_from_env

RATE_LIMIT_WAIT_ENV = "RLKEEP_HUB_RATE_LIMIT_WAIT"
DEFAULT_RATE_LIMIT_WAIT = 300.0  # seconds one request may spend waiting out 429 answers


def rate_limit_bound() -> float:
    """Seconds one request may spend waiting out 429 answers (RLKEEP_HUB_RATE_LIMIT_WAIT)."""
    return seconds_from_env(RATE_LIMIT_WAIT_ENV, DEFAULT_RATE_LIMIT_WAIT)


def _replayable(request: httpx2.Request) -> bool:
    """A body held in memory (JSON, a commit's lines) can be sent again; a file being streamed cannot."""
    return isinstance(request.stream, httpx2.ByteStream)


class RateLimitTransport(httpx2.BaseTransport):
    """Honours 429 + Retry-After (delay seconds or an HTTP date; backoff without one) for every Hub
    request whose body can be sent again, within a bounded total wait per request.

    huggingface_hub retries some calls on 429 by itself, sleeping whatever Retry-After says, and
    others (the commit) not at all: waiting here gives every call the same, bounded, behaviour. A
    streamed body (an LFS PUT of a file) goes back to the client's own retry while the bound holds.
    """

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        waited, answers = 0.0, 0
        while True:
            response = self.inner.handle_request(request)
            if response.status_code != 429:
                return response
            answers += 1
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            pause = retry_after if retry_after is not None else min(30.0, 2.0 ** (answers - 1))
            bound = rate_limit_bound()
            if waited + pause > bound:
                response.close()
                path = request.url.path
                asked = f"asks to wait {pause:g} s more" if retry_after is not None else "still answers 429"
                raise HubRateLimited(
                    f"rate limited: HTTP 429 on {request.method} {path} ({hub_call_of(request.method, path)}); the Hub "
                    f"{asked} after {answers} such answers and {waited:.0f} s of waiting, past the {bound:g} s allowed "
                    f"({RATE_LIMIT_WAIT_ENV}): rerun later, or raise the bound")
            if not _replayable(request):
                return response
            response.read()
            response.close()
            time.sleep(pause)
            waited += pause

    def close(self) -> None:
        self.inner.close()


def client_factory_with_rate_limits(hooks: dict[str, list]) -> Callable[[], httpx2.Client]:
    """A factory of clients like huggingface_hub's own (its request hooks `hooks`, no timeout,
    redirects followed) over RateLimitTransport."""
    def client() -> httpx2.Client:
        return httpx2.Client(event_hooks=hooks, follow_redirects=True, timeout=None,
                             transport=RateLimitTransport(httpx2.HTTPTransport()))
    return client


_rate_limits_installed = False


def install_rate_limit_handling() -> None:
    """Every huggingface_hub request of this process goes through RateLimitTransport (once). The
    request hooks are those of the session huggingface_hub makes itself (get_session), taken before
    set_client_factory closes it."""
    global _rate_limits_installed
    if not _rate_limits_installed:
        set_client_factory(client_factory_with_rate_limits(dict(get_session().event_hooks)))
        _rate_limits_installed = True
