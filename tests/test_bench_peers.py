"""The benchmark harness's comparison (tests/benchmarks/peers.py): rounds alternate their order, the
ratio is taken within a round, and warm-up rounds are kept as runs but never compared."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
import peers  # noqa: E402


def _timed(name: str, seconds: Iterator[float], order: list[str]) -> peers.Contender:
    def run() -> dict[str, float]:
        order.append(name)
        return {"seconds": next(seconds)}

    return peers.Contender(name, run)


def test_warm_up_rounds_are_kept_but_not_compared_and_rounds_alternate() -> None:
    order: list[str] = []
    # the warm-up round would make rlkeep look 3x faster; the timed rounds say 0.5x of the peer's time
    contenders = [_timed("rlkeep", iter([1.0, 2.0, 2.0]), order), _timed("peer", iter([3.0, 4.0, 4.0]), order)]
    result = peers.interleave(contenders, 2, warmup=1)
    assert result["ratios"]["peer"]["per_round"] == [0.5, 0.5]
    assert [(run["name"], run["round"], run.get("warmup", False)) for run in result["runs"]] == [
        ("rlkeep", -1, True), ("peer", -1, True), ("rlkeep", 0, False), ("peer", 0, False),
        ("peer", 1, False), ("rlkeep", 1, False)]
    assert order == ["rlkeep", "peer", "rlkeep", "peer", "peer", "rlkeep"]
    assert result["seconds"]["rlkeep"] == {"min": 2.0, "median": 2.0, "max": 2.0}
