"""Archive a finished run: one deterministic `.tgz` of everything informative, plus its MANIFEST.

Pack-rat by design (runbook crud-archive-run): every member of the two sync tars and the
job's small files goes in, except what is both non-informative and large: weights and
checkpoints, core and memory dumps, caches, and raw terminal recordings above a size
threshold. Nothing is skipped silently: the MANIFEST lists every artifact as kept or skipped
with its size (and reason).

The parts, one job each: `manifest` (the skip rule and the MANIFEST text), `build` (plan and
write the tgz), `verify` (hold a tgz to its MANIFEST), `upload` (copy it to archive.dest and
verify the remote copy), `step` (the `archive` and `verify_archive` pipeline steps). The names
below are the package's public surface (`from rlkeep.archive import ...`).
"""
from rlkeep.archive.build import GZIP_LEVEL, TREE_NAMES, Planned, _check_member_name, build_archive, job_files
from rlkeep.archive.manifest import (
    CACHE_PARTS,
    CACHE_SUFFIXES,
    CORE_TEXT_SUFFIXES,
    DEFAULT_LARGE_THRESHOLD,
    MANIFEST_MEMBER,
    TERMINAL_RECORDINGS,
    WEIGHT_PATTERNS,
    ManifestEntry,
    archive_rule,
    iter_manifest_entries,
    manifest_text,
    parse_manifest,
    summary_counts,
    summary_from_chain,
    summary_line,
)
from rlkeep.archive.step import archive_step, verify_archive_step
from rlkeep.archive.upload import (
    CONSISTENCY_WAIT_ENV,
    DEFAULT_CONSISTENCY_WAIT,
    HF_DATASET_PREFIX,
    consistency_bound,
    upload_and_verify,
    upload_archive,
    verified_remote_copy,
    verify_uploaded_archive,
)
from rlkeep.archive.verify import verify_archive

__all__ = [
    "CACHE_PARTS", "CACHE_SUFFIXES", "CONSISTENCY_WAIT_ENV", "CORE_TEXT_SUFFIXES", "DEFAULT_CONSISTENCY_WAIT",
    "DEFAULT_LARGE_THRESHOLD", "GZIP_LEVEL", "HF_DATASET_PREFIX", "MANIFEST_MEMBER", "TERMINAL_RECORDINGS",
    "TREE_NAMES", "WEIGHT_PATTERNS", "ManifestEntry", "Planned", "_check_member_name", "archive_rule", "archive_step",
    "build_archive", "consistency_bound", "iter_manifest_entries", "job_files", "manifest_text", "parse_manifest",
    "summary_counts", "summary_from_chain", "summary_line", "upload_and_verify", "upload_archive",
    "verified_remote_copy", "verify_archive", "verify_archive_step", "verify_uploaded_archive",
]
