"""The completion record: DONE, REPORT.md and STATUS.json (the face: the logic is
rlkeep.report.completion's, the step rlkeep.report.step's)."""
from __future__ import annotations

from rlkeep.report.completion import (ARTIFACTS, ARTIFACT_STEPS, AUTHORITY, REVISION_KEYS, artifact_table,
                                      attempts_without_metrics, blocking_reason, build_completion_record,
                                      build_status, complete_candidates, continue_command, disk_need, grant_command,
                                      invocation_from_argv, render_report, rlkeep_revision, run_source_revision,
                                      skipped_log_lines, terminal_state)

__all__ = [
    "ARTIFACTS", "ARTIFACT_STEPS", "AUTHORITY", "REVISION_KEYS", "artifact_table", "attempts_without_metrics",
    "blocking_reason", "build_completion_record", "build_status", "complete_candidates", "continue_command",
    "disk_need", "grant_command", "invocation_from_argv", "render_report", "rlkeep_revision",
    "run_source_revision", "skipped_log_lines", "terminal_state",
]
