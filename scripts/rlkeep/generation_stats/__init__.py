"""The generation statistics of metrics/ (the face: scanning logs.tar and rendering the files is
rlkeep.generation_stats.stats', the step rlkeep.generation_stats.step's)."""
from __future__ import annotations

from rlkeep.generation_stats.stats import (FILES, GenerationStats, GenerationStatsError, NOT_READ_LISTED, WANTED,
                                           csv_bytes, files_markdown, read_tables, render, scan_logs_tar, sections)

__all__ = [
    "FILES", "GenerationStats", "GenerationStatsError", "NOT_READ_LISTED", "WANTED", "csv_bytes",
    "files_markdown", "read_tables", "render", "scan_logs_tar", "sections",
]
