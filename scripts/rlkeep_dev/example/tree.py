"""Writing files under the example run's root (a private temp tree, renamed into place at the end)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, relative: str) -> Path:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_bytes(self, relative: str, data: bytes) -> None:
        self.path(relative).write_bytes(data)

    def write_text(self, relative: str, text: str) -> None:
        self.path(relative).write_bytes(text.encode("utf-8"))

    def write_json(self, relative: str, obj: Any, *, indent: int | None = 4, sort_keys: bool = False) -> None:
        self.write_text(relative, json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False))


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, keyed by its POSIX path relative to `root`."""
    digests = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests[path.relative_to(root).as_posix()] = digest.hexdigest()
    return digests
