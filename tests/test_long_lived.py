"""A sync's listing is kept out of the garbage collector's full rescans while the step holds it."""
from __future__ import annotations

import gc
from pathlib import Path

from rlkeep.storage import ObjectInfo, open_store
from rlkeep.sync.step import SETTLE_EVERY, LongLived, _trace_listing


def test_long_lived_records_are_frozen_inside_and_given_back_after() -> None:
    assert gc.get_freeze_count() == 0, "this test needs a process nothing has frozen"
    with LongLived() as heap:
        kept = [[index] for index in range(100)]
        heap.settle()
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0


def test_inside_an_outer_freeze_long_lived_leaves_it_alone() -> None:
    gc.freeze()
    try:
        outer = gc.get_freeze_count()
        with LongLived() as heap:
            heap.settle()
        assert gc.get_freeze_count() == outer
    finally:
        gc.unfreeze()


class CountingHeap(LongLived):
    def __init__(self) -> None:
        self.settled = 0

    def settle(self) -> None:
        self.settled += 1
        super().settle()


def test_the_trace_listing_is_settled_page_by_page_and_split_at_the_trace_prefix(tmp_path: Path) -> None:
    keys = [f"trace_jobs/task__{index:05d}/result.json" for index in range(2 * SETTLE_EVERY + 5)]
    for key in [*keys, "logs/rl-demo.out", "ckpts/latest_ckpt_global_step.txt"]:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"{}")
    with CountingHeap() as heap:
        traces, others = _trace_listing(open_store(tmp_path.as_uri()), "trace_jobs/", heap)
    assert heap.settled == (len(keys) + 2) // SETTLE_EVERY
    assert traces == [ObjectInfo(key.removeprefix("trace_jobs/"), 2) for key in keys]
    assert sorted(info.key for info in others) == ["ckpts/latest_ckpt_global_step.txt", "logs/rl-demo.out"]
