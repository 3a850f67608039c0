"""Find and redact credential-shaped text in a tree of run artifacts, in place.

`RULES` is the one table of detectors: each row is a literal prefix (or a few), a pattern body,
the group to redact, and a positive and a negative sample that the tests run. Matching is CPython
`re` on bytes, so no file is skipped for failing to decode: latin-1 and broken UTF-8 are scanned
as they are. Because every row starts with a literal, a prefilter finds where prefixes occur and
only those rows are tried, only there. With hyperscan installed the prefilter is one SIMD
multi-pattern pass over each window; with google-re2, one DFA pass; with neither, one substring
test per prefix (a trie regex on short texts); bench/results/redaction.json has their rates.
The prefilter only narrows: findings are the same.

Files stream through in ~1 MiB windows cut at newlines. The last `OVERLAP` bytes of a window are
scanned again as the start of the next one, so no match (all are bounded, the longest a PEM block
or a JWT of a few KiB) is cut in half, and memory stays at a few windows whatever the file size.
A redacted span becomes `<redacted:KIND>` followed by the line breaks it contained, so line
numbers stay true; markers are masked before matching and the text around each new marker is
scanned again until clean, so a second run finds nothing. Findings carry kind, path and line,
never the value.

Containers are read inside (gzip, bzip2, xz, zstd, tar, zip, parquet, arrow; nested, streamed,
bombs refused) and rewritten with their members redacted; an encoded secret (percent, JSON
escapes, base64) is found by decoding the token around a trigger; a secret a writer broke
(a terminal's wrap, a shell's backslash-newline, JSONL records, table rows) by joining the pieces.
What can be neither read nor is of a kind that carries no text is listed as unreadable, and a
check fails on it (fail closed).

One module per job: common (shared sizes and the marker), filters (value filters), samples (the
table's samples), rules (the table), spans (matching one window: probes, spans, markers), forms
(encoded forms), joins (broken secrets), prefilter (Hyperscan / RE2 / stdlib candidate search), engine (the Redactor),
rewrite (writing in place), filetypes (what a file is), streams (decompression with bounds,
recompression), containers (tar, zip, nesting), columnar (parquet, arrow), walk (trees and
tars) and cli. The public names are re-exported here.
"""
from __future__ import annotations

from rlkeep.redaction.cli import cli_main
from rlkeep.redaction.common import (
    CHUNK_SIZE,
    CONTEXT,
    ENVIRONMENT_KIND,
    MARKER_PREFIX,
    MAX_MATCH_LENGTH,
    MIN_LITERAL_LENGTH,
    OVERLAP,
)
from rlkeep.redaction.engine import (
    ENV_CREDENTIAL_NAMES,
    ENV_CREDENTIAL_SUFFIXES,
    Redactor,
    credential_variable_names,
    redactor_from_environment,
)
from rlkeep.redaction.filetypes import CONTAINERS, NO_TEXT_KINDS, MAX_SAFETENSORS_HEADER, SNIFF_SIZE, classify
from rlkeep.redaction.prefilter import available_engines
from rlkeep.redaction.rules import KINDS, MAX_PREFIX_LENGTH, RULES, Rule
from rlkeep.redaction.walk import SAFETENSORS_REASON, Finding, TreeReport, redact_tar, redact_tree, scan_file

__all__ = [
    "CHUNK_SIZE", "CONTAINERS", "NO_TEXT_KINDS", "CONTEXT", "ENVIRONMENT_KIND", "ENV_CREDENTIAL_NAMES",
    "ENV_CREDENTIAL_SUFFIXES", "KINDS", "MARKER_PREFIX", "MAX_MATCH_LENGTH", "MAX_PREFIX_LENGTH",
    "MAX_SAFETENSORS_HEADER", "MIN_LITERAL_LENGTH", "OVERLAP", "RULES", "SAFETENSORS_REASON", "SNIFF_SIZE",
    "Finding", "Redactor", "Rule", "TreeReport", "available_engines", "classify", "cli_main",
    "credential_variable_names", "redact_tar", "redact_tree", "redactor_from_environment", "scan_file",
]
