"""rlkeep.retrying: the one retry policy every wait in rlkeep goes through."""
from __future__ import annotations

import pytest

from rlkeep.retrying import Backoff, Tries, retrying


class Flaky(Exception):
    pass


class Throttled(Exception):
    def __init__(self, after: float | None) -> None:
        super().__init__("throttled")
        self.after = after


def _run(policy, action):
    return policy(action)


def test_backoff_grows_by_its_factor_up_to_its_cap():
    backoff = Backoff(first=0.5, factor=3.0, cap=4.0)
    assert [backoff.pause(n) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.0, 4.0]


def test_jitter_only_shortens_a_pause():
    backoff = Backoff(first=2.0, jitter=0.5)
    pauses = [backoff.pause(1) for _ in range(200)]
    assert all(1.0 <= p <= 2.0 for p in pauses) and len(set(pauses)) > 1


def test_a_transient_failure_is_tried_again_with_the_backoff_between():
    slept: list[float] = []
    calls = iter([Flaky(), Flaky(), "ok"])

    def action():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    policy = retrying(on=lambda e: isinstance(e, Flaky), backoff=Backoff(first=0.1), tries=4, sleep=slept.append)
    assert _run(policy, action) == "ok"
    assert slept == [0.1, 0.2]


def test_past_its_tries_the_last_failure_is_raised_and_others_at_once():
    slept: list[float] = []
    made = []

    def flaky():
        made.append(1)
        raise Flaky(len(made))

    with pytest.raises(Flaky) as raised:
        _run(retrying(on=lambda e: isinstance(e, Flaky), backoff=Backoff(first=1.0), tries=3, sleep=slept.append), flaky)
    assert raised.value.args == (3,) and slept == [1.0, 2.0]

    def broken():
        made.append(1)
        raise KeyError("not transient")

    made.clear()
    with pytest.raises(KeyError):
        _run(retrying(on=lambda e: isinstance(e, Flaky), backoff=Backoff(first=1.0), tries=3, sleep=slept.append), broken)
    assert len(made) == 1


def test_the_delay_the_other_side_asks_for_replaces_the_backoff_and_the_bound_stops_before_passing():
    slept: list[float] = []
    answers = iter([Throttled(3.0), Throttled(None), Throttled(5.0), Throttled(1.0)])
    seen: list[Tries] = []

    def action():
        raise next(answers)

    def gave_up(tries: Tries):
        seen.append(tries)
        raise RuntimeError(f"waited {tries.waited:g} s, asked {tries.asked}")

    policy = retrying(on=lambda e: isinstance(e, Throttled), asked=lambda e: e.after, backoff=Backoff(first=0.5),
                      counts=lambda e: False, tries=1, waiting_bound=8.0, gave_up=gave_up, sleep=slept.append)
    with pytest.raises(RuntimeError, match=r"waited 4 s, asked 5.0"):
        _run(policy, action)
    # throttles do not count towards tries=1; the second pause is the backoff's second (1 s);
    # the third answer's 5 s would take the wait past the 8 s bound
    assert slept == [3.0, 1.0] and seen[0].made == 3 and seen[0].counted == 0


def test_a_result_is_polled_until_it_is_good_within_the_bound():
    slept: list[float] = []
    states = iter(["running", "running", "done"])
    policy = retrying(until=lambda state: state == "done", backoff=Backoff(first=0.1, cap=0.15),
                      waiting_bound=10.0, sleep=slept.append)
    assert _run(policy, lambda: next(states)) == "done"
    assert slept == [0.1, 0.15]

    never = retrying(until=lambda state: False, backoff=Backoff(first=1.0), waiting_bound=2.5, sleep=slept.append)
    assert _run(never, lambda: "running") == "running"


def test_before_sleep_sees_each_pause():
    told: list[tuple[int, float]] = []
    calls = iter([Flaky(), "ok"])

    def action():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    policy = retrying(on=lambda e: True, backoff=Backoff(first=5.0), tries=2, sleep=lambda s: None,
                      before_sleep=lambda t: told.append((t.made, t.last_pause)))
    assert _run(policy, action) == "ok" and told == [(1, 5.0)]
