"""write_json streams the one JSON style: the same bytes as dumps, and nothing left when it fails."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlkeep.jsonio import dumps, write_json

MANIFEST = {"status": "completed", "objects": [{"key": f"task__{i:04d}/é/result.json", "sha256": "ab" * 32, "size": i}
                                               for i in range(50)],
            "objects_skipped": [], "space": {"needed_bytes": 10}, "note": "line\u2028break \"quoted\"\n",
            "ratio": 1.5, "none": None, "flag": True, "nested": [[], {}, [1, [2, {"b": 1, "a": 2}]]]}


def test_write_json_writes_the_bytes_of_dumps(tmp_path: Path) -> None:
    path = tmp_path / "sync" / "trace_jobs.manifest.json"
    write_json(path, MANIFEST)
    assert path.read_bytes() == dumps(MANIFEST).encode("utf-8")
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_value_json_cannot_encode_leaves_neither_the_file_nor_a_part(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    with pytest.raises(TypeError):
        write_json(path, {**MANIFEST, "bad": object()})
    assert list(tmp_path.iterdir()) == []
