"""rlkeep.hashing: the one file-sha256 helper, over mapped windows, equals hashlib on the bytes."""
from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path

import pytest

from rlkeep import hashing

GRANULE = mmap.ALLOCATIONGRANULARITY


@pytest.mark.parametrize("size", [0, 1, GRANULE - 1, GRANULE, GRANULE + 1, 5 * GRANULE + 17])
def test_sha256_file_equals_hashlib_across_window_edges(tmp_path: Path, size: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "HASH_WINDOW_BYTES", 2 * GRANULE)  # several windows for the larger files
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert hashing.sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_hash_range_feeds_only_the_range(tmp_path: Path) -> None:
    data = os.urandom(3 * GRANULE)
    path = tmp_path / "blob"
    path.write_bytes(data)
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        hashing.hash_range(digest, fd, GRANULE + 5, 2 * GRANULE + 9)  # starts mid-window
    finally:
        os.close(fd)
    assert digest.hexdigest() == hashlib.sha256(data[GRANULE + 5:2 * GRANULE + 9]).hexdigest()
