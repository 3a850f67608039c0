"""Sizes and markers every part of redaction shares: the window, its overlap, the marker text, and
how a member inside a container is named (each level's name joined with `::`)."""
from __future__ import annotations

CHUNK_SIZE = 1 << 20
# Longest possible match: a PEM block (header + 16 KiB body + footer) or a JWT (3 x 8 KiB).
OVERLAP = 64 << 10
# How far before the redacted text a match may start (keyword + context), kept from the window before.
CONTEXT = 1 << 10
# Upper bound of any rule's match (PEM: 16 KiB body; JWT: 3 x 8 KiB parts); OVERLAP must exceed it.
MAX_MATCH_LENGTH = 32 << 10
MIN_LITERAL_LENGTH = 8
ENVIRONMENT_KIND = "environment_credential"
MARKER_PREFIX = b"<redacted:"
MARKER_PATTERN = rb"<redacted:[a-z0-9_]{1,64}>"  # what redaction writes; masked before matching
SEPARATOR = "::"  # between the names of each level of a member path: `logs.tar::ray/worker-1.out.gz::worker-1.out`


def member_path(parent: str, name: str) -> str:
    return name if not parent else f"{parent}{SEPARATOR}{name}"
