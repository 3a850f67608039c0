"""How rlkeep tries again: one policy over tenacity, where what differs between callers is a parameter.

A caller says which failures (`on`) or which results (`until`) deserve another try, how the pauses
grow (`Backoff`), at most how many tries count (`tries`), at most how many seconds of waiting in all
(`waiting_bound`), and how to read a delay the other side asked for (`asked`: a Retry-After). When
the policy stops, the last failure is raised again, or `gave_up` says what to raise instead (it sees
how many tries were made and how long was waited). Every wait in rlkeep goes through here, so a
bound, a backoff or a Retry-After means the same thing in every step.

    for attempt in retrying(on=is_transient, backoff=Backoff(first=0.2, cap=8.0), tries=4):
        with attempt:
            fetch()
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tenacity
from tenacity import RetryCallState

__all__ = ["Backoff", "RetryCallState", "Tries", "retrying"]


@dataclass(frozen=True)
class Backoff:
    """Pauses that start at `first` seconds and grow by `factor` up to `cap`; `jitter` (0 to 1) takes
    up to that fraction off each pause at random, so callers that failed together do not return together."""

    first: float
    factor: float = 2.0
    cap: float = math.inf
    jitter: float = 0.0

    def pause(self, failures: int) -> float:
        """The pause after the `failures`-th failure (1 is the first)."""
        base = min(self.cap, self.first * self.factor ** max(0, failures - 1))
        return base * random.uniform(1.0 - self.jitter, 1.0) if self.jitter else base


@dataclass(frozen=True)
class Tries:
    """What the policy had done when it stopped: handed to `gave_up`."""

    made: int  # tries made in all, throttled ones included
    counted: int  # those that count towards `tries`
    waited: float  # seconds slept between them
    last_pause: float  # the pause the policy would have taken next
    asked: float | None  # the delay the other side asked for last, if it did
    error: BaseException | None  # the last failure (None when polling a result)
    result: Any  # the last result when polling with `until`


def retrying(*, backoff: Backoff, on: Callable[[BaseException], bool] | None = None,
             until: Callable[[Any], bool] | None = None, tries: int | None = None,
             waiting_bound: float | None = None, asked: Callable[[BaseException], float | None] | None = None,
             counts: Callable[[BaseException], bool] | None = None,
             gave_up: Callable[[Tries], None] | None = None,
             sleep: Callable[[float], None] = time.sleep,
             before_sleep: Callable[[Tries], None] | None = None) -> tenacity.Retrying:
    """A fresh policy for one operation (use each once).

    on: a failure for which another try may help (others raise at once); until: with a result
    instead, try again while it is False. tries: at most this many counted tries (None: no count).
    waiting_bound: stop before a pause that would take the total wait past it (None: no bound).
    asked: the delay the other side asked for, used instead of the backoff when it says one.
    counts: whether a failure counts towards `tries` (a throttle usually does not; default: all).
    gave_up: called when the policy stops; it raises the caller's own error, or returns to have
    the last failure (or, polling, the last result) stand.
    Polling with `until` needs the call form, `policy(fetch)`: a `with attempt:` block has no result.
    """
    counted_failures = 0
    last_asked: float | None = None

    def failure_of(state: RetryCallState) -> BaseException | None:
        return state.outcome.exception() if state.outcome is not None and state.outcome.failed else None

    def snapshot(state: RetryCallState) -> Tries:
        error = failure_of(state)
        result = state.outcome.result() if state.outcome is not None and not state.outcome.failed else None
        return Tries(made=state.attempt_number, counted=counted_failures, waited=state.idle_for,
                     last_pause=state.upcoming_sleep, asked=last_asked, error=error, result=result)

    def should_retry(state: RetryCallState) -> bool:
        nonlocal counted_failures
        error = failure_of(state)
        if error is not None:
            if on is None or not on(error):
                return False
            if counts is None or counts(error):
                counted_failures += 1
            return True
        return until is not None and not until(state.outcome.result())

    def wait(state: RetryCallState) -> float:
        nonlocal last_asked
        error = failure_of(state)
        last_asked = asked(error) if error is not None and asked is not None else None
        return last_asked if last_asked is not None else backoff.pause(state.attempt_number)

    def stop(state: RetryCallState) -> bool:
        if tries is not None and counted_failures >= tries:
            return True
        return waiting_bound is not None and state.idle_for + state.upcoming_sleep > waiting_bound

    def on_stop(state: RetryCallState) -> Any:
        if gave_up is not None:
            gave_up(snapshot(state))
        error = failure_of(state)
        if error is not None:
            raise error
        return state.outcome.result()

    return tenacity.Retrying(
        retry=should_retry, wait=wait, stop=stop, sleep=sleep, retry_error_callback=on_stop,
        before_sleep=(lambda state: before_sleep(snapshot(state))) if before_sleep is not None else None)
