"""Value filters: a match is only a finding when the value it would redact passes its rule's filter."""
from __future__ import annotations

import re

from rlkeep.redaction.common import MARKER_PREFIX

_DIGIT = re.compile(rb"[0-9]")
_LETTER = re.compile(rb"[A-Za-z]")
_UPPER = re.compile(rb"[A-Z]")
_LOWER = re.compile(rb"[a-z]")
_HEX = re.compile(rb"[0-9a-fA-F]+")
_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DIGEST = re.compile(rb"(?:sha1|sha224|sha256|sha384|sha512|md5|blake2b|xxh64|xxh3):[0-9a-fA-F]{16,}", re.I)


def _is_placeholder(value: bytes) -> bool:
    """`${VAR}`, `$VAR`, `{{ var }}`, `%(var)s`, `%VAR%`, `<value>`, `***`, `xxxxxxxx`, a marker."""
    if value[:1] in (b"$", b"<", b"{") or value[:2] == b"%(":
        return True
    if value[:1] == b"%" and value.endswith(b"%"):
        return True
    if b"***" in value or MARKER_PREFIX in value:
        return True
    return len(set(value)) <= 2


def _has_letter_and_digit(value: bytes) -> bool:
    return _DIGIT.search(value) is not None and _LETTER.search(value) is not None


def accept_opaque(value: bytes) -> bool:
    return not _is_placeholder(value)


def accept_letter_and_digit(value: bytes) -> bool:
    return _has_letter_and_digit(value) and not _is_placeholder(value)


def accept_two_classes(value: bytes) -> bool:
    classes = sum(pattern.search(value) is not None for pattern in (_UPPER, _LOWER, _DIGIT))
    return len(value) >= 8 and classes >= 2 and not _is_placeholder(value)


def accept_with_digit(value: bytes) -> bool:
    return _DIGIT.search(value) is not None


def accept_sk_key(value: bytes) -> bool:
    """The run after the last `-` of a bare `sk-` key mixes letters and digits: `sk-` followed by
    a long word (`sk-` + a hyphenated model name, a slug of letters) or a long number is not one."""
    return _has_letter_and_digit(value[value.rfind(b"-") + 1:])


def accept_not_example(value: bytes) -> bool:
    return not value.endswith(b"EXAMPLE")


def accept_aws_secret(value: bytes) -> bool:
    """40 base64 characters with both cases: a git SHA or other hex near `aws` is not one."""
    return _UPPER.search(value) is not None and _LOWER.search(value) is not None


def accept_generic(value: bytes) -> bool:
    """The value of `password=` / `token:` / `api_key=`: mixed letters and digits, and not one of
    the identifiers ML logs are full of (uuids, digests, git SHAs, paths, templates, markers)."""
    if len(value) < 8 or _is_placeholder(value) or not _has_letter_and_digit(value):
        return False
    if _UUID.fullmatch(value) or _DIGEST.fullmatch(value):
        return False
    if _HEX.fullmatch(value) and (len(value) in (40, 64) or len(value) < 16):
        return False  # git SHA-1, SHA-256 digest, short hex id
    if value[:2] in (b"./", b"~/") or (value[:1] == b"/" and value.count(b"/") >= 2):
        return False  # a filesystem path
    return True
