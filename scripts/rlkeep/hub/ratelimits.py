"""Rate limits (HTTP 429): every huggingface_hub request of this process goes through
RateLimitTransport, which waits out 429 answers within a bounded total wait per request
(RLKEEP_HUB_RATE_LIMIT_WAIT) and then stops with HubRateLimited.
"""
from __future__ import annotations

from collections.abc import Callable

import httpx2
from huggingface_hub import get_session, set_client_factory

from rlkeep.errors import RlkeepError
from rlkeep.hub.calls import hub_call_of
from rlkeep.retrying import Backoff, Tries, retrying
from rlkeep.storage import retry_after_seconds
from rlkeep.waits import seconds_from_env

RATE_LIMIT_WAIT_ENV = "RLKEEP_HUB_RATE_LIMIT_WAIT"
DEFAULT_RATE_LIMIT_WAIT = 300.0  # seconds one request may spend waiting out 429 answers
RATE_LIMIT_BACKOFF = Backoff(first=1.0, factor=2.0, cap=30.0)  # between 429 answers that name no Retry-After


class HubRateLimited(RlkeepError):
    """The Hub kept answering 429 for longer than the bound allows (permanent for this run: the
    bound was the retry; rerun later)."""


class _Throttled(Exception):
    """A 429 answer, carried through the retry policy; `retry_after` is the delay it asked for."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__("HTTP 429")
        self.response = response
        self.retry_after = retry_after_seconds(response.headers.get("Retry-After"))


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
        bound = rate_limit_bound()
        replayable = _replayable(request)

        def give_up(tries: Tries) -> None:
            throttled = tries.error
            assert isinstance(throttled, _Throttled)
            if tries.waited + tries.last_pause <= bound:
                return None  # a streamed body, within the bound: its 429 goes back to the client's own retry
            throttled.response.close()
            path = request.url.path
            asked = f"asks to wait {tries.last_pause:g} s more" if tries.asked is not None else "still answers 429"
            raise HubRateLimited(
                f"rate limited: HTTP 429 on {request.method} {path} ({hub_call_of(request.method, path)}); the Hub "
                f"{asked} after {tries.made} such answers and {tries.waited:.0f} s of waiting, past the {bound:g} s "
                f"allowed ({RATE_LIMIT_WAIT_ENV}): rerun later, or raise the bound")

        policy = retrying(on=lambda error: isinstance(error, _Throttled), backoff=RATE_LIMIT_BACKOFF,
                          asked=lambda error: error.retry_after if isinstance(error, _Throttled) else None,
                          waiting_bound=bound, tries=None if replayable else 1,
                          gave_up=give_up)
        try:
            for attempt in policy:
                with attempt:
                    response = self.inner.handle_request(request)
                    if response.status_code == 429:
                        if replayable:  # sent again after the pause: this answer is done with
                            response.read()
                            response.close()
                        raise _Throttled(response)
            return response
        except _Throttled as throttled:  # a streamed body that cannot be sent again, within the bound
            return throttled.response

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
