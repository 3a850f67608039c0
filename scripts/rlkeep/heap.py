"""Keeping what a step holds for its whole run out of the cyclic garbage collector's rescans.

CPython's collector rescans every tracked object that has reached its oldest generation at each
full collection, and a step that keeps one record per listed object (a sync's listing) while it
allocates per object (requests, bodies, parsed pages) triggers full collections as it goes: each
walks the whole listing again. Moving what is alive once the listing is built into the permanent
generation (gc.freeze) leaves the collections only the objects made since; they are given back
(gc.unfreeze) when the step is done with them, so a step run inside a longer process (a test)
frees them as usual.
"""
from __future__ import annotations

import gc
from types import TracebackType


class LongLived:
    """`with LongLived() as heap:` ... `heap.settle()` once the long-lived records are built.

    Inside an outer freeze (someone else's gc.freeze) it does nothing: unfreezing at the end
    would undo theirs."""

    def __enter__(self) -> "LongLived":
        self.owned = gc.get_freeze_count() == 0
        return self

    def settle(self) -> None:
        """Everything alive now is out of the collector's rescans until the `with` ends."""
        if self.owned:
            gc.freeze()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.owned:
            gc.unfreeze()
