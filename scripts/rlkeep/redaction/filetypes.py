"""What a file is: text (scanned as bytes), UTF-16/32 text, a safetensors file, a container
rlkeep reads inside (compressed stream, tar, zip, parquet, arrow), a kind known to carry no text,
or binary (not readable: a check that meets one fails)."""
from __future__ import annotations

import codecs
import os
from dataclasses import dataclass

SNIFF_SIZE = 8192
MAX_SAFETENSORS_HEADER = 100 << 20

# Containers: opened and read inside (rlkeep.redaction.containers).
CONTAINERS = ("gzip", "bzip2", "xz", "zstd", "tar", "zip", "parquet", "arrow")
# Binary formats that store their strings as plain bytes (pickle protocol 2+, a SentencePiece
# model's protobuf): scanned as bytes, so nothing in them goes unread; rlkeep cannot rewrite them,
# so a finding in one stops redaction naming it.
# Kinds that carry no text a secret could hide in: image pixels and plain numeric arrays. Short on
# purpose; anything else that is not text or a container makes a check fail (fail closed).
NO_TEXT_KINDS = ("png", "jpeg", "gif", "webp", "numpy")
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "parquet"), (b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"),
    (b"BZh", "bzip2"),
    (b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"), (b"GIF89a", "gif"),
    (b"(\xb5/\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"7z\xbc\xaf\x27\x1c", "7z"), (b"\x7fELF", "elf"),
    (b"\x93NUMPY", "numpy"), (b"SQLite format 3\x00", "sqlite"), (b"ARROW1", "arrow"), (b"%PDF-", "pdf"),
    (b"\x89HDF\r\n\x1a\n", "hdf5"), (b"RIFF", "riff"), (b"\x04\x22\x4d\x18", "lz4"),
)
_MAGIC_BY_FIRST_BYTE: dict[int, tuple[tuple[bytes, str], ...]] = {
    first: tuple(entry for entry in _MAGIC if entry[0][0] == first) for first in {magic[0] for magic, _ in _MAGIC}}
_BOMS: tuple[tuple[bytes, str, int], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le", 4), (codecs.BOM_UTF32_BE, "utf-32-be", 4),
    (codecs.BOM_UTF16_LE, "utf-16-le", 2), (codecs.BOM_UTF16_BE, "utf-16-be", 2),
)
_CONTROL_BYTES = bytes(c for c in range(32) if c not in b"\t\n\r\f\v\b\x1b")


@dataclass(frozen=True)
class FileType:
    handling: str  # "text" | "wide" | "safetensors" | "container" | "verbatim" | "no_text" | "binary"
    detail: str = ""  # wide: the codec; container, no_text: the format; binary: why
    bom: bytes = b""
    unit: int = 1


def _safetensors_header_length(head: bytes, size: int) -> int | None:
    if len(head) < 9 or head[8:9] != b"{":
        return None
    length = int.from_bytes(head[:8], "little")
    return length if 2 <= length <= min(size - 8, MAX_SAFETENSORS_HEADER) else None


def _utf16_without_bom(head: bytes) -> str | None:
    sample = head[: len(head) - len(head) % 2]
    if len(sample) < 4:
        return None
    even, odd = sample[0::2], sample[1::2]
    half = len(sample) // 2
    if odd.count(0) > 0.9 * half and even.count(0) < 0.1 * half:
        return "utf-16-le"
    if even.count(0) > 0.9 * half and odd.count(0) < 0.1 * half:
        return "utf-16-be"
    return None


def _known(what: str, head: bytes) -> FileType:
    if what in CONTAINERS:
        return FileType("container", what)
    if what == "numpy" and b"'|O'" in head[:256]:
        return FileType("binary", "numpy object array (pickled)")
    return FileType("no_text" if what in NO_TEXT_KINDS else "binary", what)


def classify(name: str, head: bytes, size: int) -> FileType:
    """Decide from the name and the first SNIFF_SIZE bytes how a file is scanned."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix == ".safetensors" or _safetensors_header_length(head, size) is not None:
        if _safetensors_header_length(head, size) is None:
            return FileType("binary", "safetensors with an unreadable header")
        return FileType("safetensors")
    for bom, encoding, unit in _BOMS:
        if head.startswith(bom):
            return FileType("wide", encoding, bom, unit)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return FileType("no_text", "webp")
    for magic, what in _MAGIC_BY_FIRST_BYTE.get(head[0], ()) if head else ():
        if head.startswith(magic) and (what != "bzip2" or head[4:10] == b"1AY&SY"):
            return _known(what, head)
    if len(head) > 262 and head[257:262] == b"ustar":
        return FileType("container", "tar")
    if suffix == ".model" and head[:1] == b"\n":
        return FileType("verbatim", "sentencepiece")
    if suffix in (".arrow", ".feather") and head[:4] == b"\xff\xff\xff\xff":
        return FileType("container", "arrow")  # the IPC stream format (`datasets` cache files)
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return FileType("verbatim", "pickle")
    if 0 in head:
        encoding = _utf16_without_bom(head)
        if encoding:
            return FileType("wide", encoding, b"", 2)
        return FileType("binary", "NUL bytes")
    if head and len(head) - len(head.translate(None, _CONTROL_BYTES)) > 0.1 * len(head):
        return FileType("binary", "control bytes")
    return FileType("text")
