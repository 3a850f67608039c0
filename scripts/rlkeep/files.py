"""Small file operations several steps share (one home each)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_or_copy(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` (no second copy of a large file), or a copy where the
    filesystem refuses the link (another device, no link support)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
