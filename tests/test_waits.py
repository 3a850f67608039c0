"""The wait bounds rlkeep reads from the environment (rlkeep.waits), shared by the store's
SlowDown handling, the archive's consistency re-checks and the Hub's 429 handling."""
from __future__ import annotations

import pytest

from rlkeep.archive import consistency_bound
from rlkeep.errors import RlkeepError
from rlkeep.hub import rate_limit_bound
from rlkeep.storage import slowdown_bound
from rlkeep.waits import seconds_from_env

BOUNDS = [("RLKEEP_STORE_SLOWDOWN_WAIT", slowdown_bound, 300.0),
          ("RLKEEP_STORE_CONSISTENCY_WAIT", consistency_bound, 30.0),
          ("RLKEEP_HUB_RATE_LIMIT_WAIT", rate_limit_bound, 300.0)]


@pytest.mark.parametrize(("variable", "bound", "default"), BOUNDS)
def test_each_bound_reads_its_own_variable(monkeypatch: pytest.MonkeyPatch, variable: str, bound, default: float) -> None:
    for other, _, _ in BOUNDS:
        monkeypatch.delenv(other, raising=False)
    assert bound() == default
    monkeypatch.setenv(variable, " 2.5 ")
    assert bound() == 2.5
    monkeypatch.setenv(variable, "")
    assert bound() == default


@pytest.mark.parametrize("text", ["soon", "-1", "nan", "1e", "5s"])
def test_anything_but_seconds_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("RLKEEP_TEST_WAIT", text)
    with pytest.raises(RlkeepError, match=r"RLKEEP_TEST_WAIT=.*expected a number of seconds"):
        seconds_from_env("RLKEEP_TEST_WAIT", 1.0)


def test_zero_is_a_bound_not_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLKEEP_TEST_WAIT", "0")
    assert seconds_from_env("RLKEEP_TEST_WAIT", 30.0) == 0.0
