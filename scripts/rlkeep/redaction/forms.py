"""Encoded forms of a secret: percent-encoded (`%2F`), JSON-escaped (`\\u002f`, `\\/`) and base64
(a secret a writer broke across lines: joins.py).

Each form has triggers, literals the prefilter finds in the same pass as the rules' prefixes, so
text without any costs nothing more. Where a trigger occurs, the token around it (up to the next
space or quote) is decoded and the decoded text is scanned with every rule; a finding there
redacts the whole encoded token. Base64 has no marker of its own: its triggers are the base64
spellings of credential prefixes (`hf_`, `AKIA`, `HF_TOKEN`, `-----BEGIN`...) at each of the three
byte alignments, the characters that do not depend on the bytes around the prefix.
"""
from __future__ import annotations

import base64
import binascii
import re
from typing import Callable, Iterator
from urllib.parse import unquote_to_bytes

PERCENT_TRIGGERS = tuple(f"%{code}".encode() for hexa in ("2F", "2B", "3D", "3A", "40", "5F", "22")
                         for code in (hexa, hexa.lower()))
JSON_TRIGGERS = (b"\\u00", b"\\/")
# Plain prefixes whose base64 spellings trigger decoding: credential prefixes and the names that
# announce one in a .env or credentials file.
_BASE64_SOURCES = (
    b"hf_", b"api_org_", b"AKIA", b"ASIA", b"ghp_", b"gho_", b"ghs_", b"github_pat_", b"sk-", b"xoxb-", b"xoxp-",
    b"wandb_v1_", b"AIza", b"-----BEGIN", b"aws_access_key_id", b"aws_secret_access_key", b"_TOKEN", b"_KEY",
    b"token", b"password", b"secret", b"machine ",
)
_MIN_TRIGGER = 4  # base64 spellings shorter than this would fire on ordinary words
MAX_TOKEN = 64 << 10  # how far a decoded token reaches either side of its trigger
_TOKEN_STOP = frozenset(b" \t\r\n\"'<>`,;()[]{}|")
_BASE64_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_")
_WRAPS = re.compile(rb"\\r\\n|\\n|\\r|\r\n|\n|\r")
_JSON_ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})|\\([/\\\"bfnrt])")
_SIMPLE = {b"/": b"/", b"\\": b"\\", b'"': b'"', b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t"}


def base64_spellings(plain: bytes) -> set[bytes]:
    """The base64 characters that spell `plain` whatever bytes come before and after it, for each
    of the three alignments (standard and URL-safe alphabets)."""
    spellings: set[bytes] = set()
    for align in range(3):
        encoded = base64.b64encode(b"\0" * align + plain + b"\0\0")
        first, last = -(-8 * align // 6), (8 * (align + len(plain))) // 6
        stable = encoded[first:last]
        if len(stable) >= _MIN_TRIGGER:
            spellings.add(stable)
            spellings.add(stable.translate(bytes.maketrans(b"+/", b"-_")))
    return spellings


BASE64_TRIGGERS = tuple(sorted({spelling for source in _BASE64_SOURCES for spelling in base64_spellings(source)}))
TRIGGERS = PERCENT_TRIGGERS + JSON_TRIGGERS + BASE64_TRIGGERS


def json_string_around(text: bytes, position: int) -> tuple[int, int]:
    """The JSON string holding `position`: up to the unescaped quote (or line end) either side."""
    low, high = max(0, position - MAX_TOKEN), min(len(text), position + MAX_TOKEN)
    start = position
    while start > low and text[start - 1] not in b"\n\r" and not (text[start - 1] == 0x22 and not _escaped(text, start - 1)):
        start -= 1
    end = position
    while end < high and text[end] not in b"\n\r" and not (text[end] == 0x22 and not _escaped(text, end)):
        end += 1
    return start, end


def _escaped(text: bytes, index: int) -> bool:
    count = 0
    while index - count - 1 >= 0 and text[index - count - 1] == 0x5C:
        count += 1
    return count % 2 == 1


def token_around(text: bytes, position: int, allow_wraps: bool) -> tuple[int, int]:
    """The token holding `position`: bytes up to a space, quote or bracket either side. A base64
    token continues across a line wrap (raw or JSON-escaped) that ends a line of base64 (a
    multiple of 4 characters, at least 16) when base64 goes on after it, as encoders wrap it."""
    start = position
    low = max(0, position - MAX_TOKEN)
    while start > low and text[start - 1] not in _TOKEN_STOP:
        start -= 1
    end = position
    line_start = start
    high = min(len(text), position + MAX_TOKEN)
    while end < high:
        byte = text[end]
        if byte not in _TOKEN_STOP and not (byte == 0x5C and text[end + 1:end + 2] in (b"n", b"r")):
            end += 1
            continue
        wrap = _WRAPS.match(text, end)
        full_line = end - line_start >= 16 and (end - line_start) % 4 == 0
        if allow_wraps and wrap and full_line and wrap.end() < high and text[wrap.end()] in _BASE64_BYTES:
            end = line_start = wrap.end()
            continue
        break
    return start, end


def json_unescape(token: bytes) -> bytes:
    def one(match: re.Match[bytes]) -> bytes:
        if match.group(1):
            return chr(int(match.group(1), 16)).encode("utf-8", "surrogatepass")
        return _SIMPLE[match.group(2)]
    return _JSON_ESCAPE.sub(one, token)


def _printable(data: bytes) -> bool:
    if not data:
        return False
    text = data.decode("utf-8", "replace")
    good = sum(1 for char in text if char.isprintable() or char in "\t\r\n")
    return good >= 0.9 * len(text)


def base64_decodings(token: bytes) -> Iterator[bytes]:
    """The token decoded as base64 (either alphabet), line wraps removed, when the result is text."""
    compact = _WRAPS.sub(b"", token).rstrip(b"=")
    for candidate in (compact, compact[1:], compact[2:], compact[3:]):  # a stray prefix (`=`, `:`) before the blob
        if len(candidate) < 8 or len(candidate) % 4 == 1:
            continue
        body = candidate + b"=" * (-len(candidate) % 4)
        for altchars in (b"+/", b"-_"):
            try:
                decoded = base64.b64decode(body, altchars=altchars, validate=True)
            except (binascii.Error, ValueError):
                continue
            if _printable(decoded):
                yield decoded


def decodings(token: bytes, trigger: bytes) -> Iterator[bytes]:
    """What `token` says once decoded in the way `trigger` suggests (nothing when it decodes to itself)."""
    if trigger in PERCENT_TRIGGERS:
        decoded = unquote_to_bytes(token)
        if decoded != token:
            yield decoded
    elif trigger in JSON_TRIGGERS:
        decoded = json_unescape(token)
        if decoded != token:
            yield decoded
    else:
        yield from base64_decodings(token)


def encoded_spans(text: bytes, hits: list[tuple[int, bytes]], lo: int, hi: int,
                  redact: Callable[[bytes], tuple[bytes, list[tuple[int, str]]]],
                  plain: Callable[[bytes], bytes]) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every token that starts in [lo, hi), holds a trigger hit, and whose
    decoding holds a finding that the token as written does not show (a presigned URL's `%2F` is
    no new finding). A stream's windows each take the tokens that start in their region, so none
    is taken twice or missed. `plain` redacts with the rules only; `redact` decodes further (to
    a bounded depth)."""
    spans: list[tuple[int, int, str]] = []
    done: set[tuple[int, int]] = set()
    for position, trigger in sorted(hits):
        if trigger in JSON_TRIGGERS:
            start, end = json_string_around(text, position)
        else:
            start, end = token_around(text, position, allow_wraps=trigger in BASE64_TRIGGERS)
        if not lo <= start < hi or (start, end) in done:
            continue
        done.add((start, end))
        written = plain(bytes(text[start:end]))
        for decoded in decodings(written, trigger):
            _, found = redact(decoded)
            if found:
                spans.append((start, end, found[0][1]))
                break
    return spans
