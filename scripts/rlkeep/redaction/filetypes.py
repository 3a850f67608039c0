"""What a file is: text (scanned as bytes), UTF-16/32 text, a safetensors file, or binary."""
from __future__ import annotations

import codecs
import os
from dataclasses import dataclass

SNIFF_SIZE = 8192
MAX_SAFETENSORS_HEADER = 100 << 20

BINARY_SUFFIXES = frozenset({
    ".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle", ".npy", ".npz", ".h5", ".hdf5", ".onnx",
    ".msgpack", ".parquet", ".arrow", ".feather", ".orc", ".avro", ".gz", ".tgz", ".tar", ".zip",
    ".zst", ".bz2", ".xz", ".7z", ".lz4", ".whl", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp",
    ".tif", ".tiff", ".ico", ".mp3", ".mp4", ".wav", ".flac", ".ogg", ".webm", ".pdf", ".so",
    ".dylib", ".dll", ".exe", ".o", ".a", ".pyc", ".class", ".jar", ".db", ".sqlite", ".sqlite3",
    ".woff", ".woff2", ".ttf", ".otf",
})
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "parquet"), (b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"),
    (b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"), (b"GIF89a", "gif"),
    (b"(\xb5/\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"7z\xbc\xaf\x27\x1c", "7z"), (b"\x7fELF", "elf"),
    (b"\x93NUMPY", "numpy"), (b"SQLite format 3\x00", "sqlite"), (b"ARROW1", "arrow"), (b"%PDF-", "pdf"),
    (b"\x89HDF\r\n\x1a\n", "hdf5"), (b"RIFF", "riff"), (b"\x04\x22\x4d\x18", "lz4"),
)
_BOMS: tuple[tuple[bytes, str, int], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le", 4), (codecs.BOM_UTF32_BE, "utf-32-be", 4),
    (codecs.BOM_UTF16_LE, "utf-16-le", 2), (codecs.BOM_UTF16_BE, "utf-16-be", 2),
)
_CONTROL_BYTES = bytes(c for c in range(32) if c not in b"\t\n\r\f\v\b\x1b")


@dataclass(frozen=True)
class FileType:
    handling: str  # "text" | "wide" | "safetensors" | "binary"
    detail: str = ""  # wide: the codec; binary: why
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
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return FileType("binary", what)
    if len(head) > 262 and head[257:262] == b"ustar":
        return FileType("binary", "tar")
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return FileType("binary", "pickle")
    if suffix in BINARY_SUFFIXES:
        return FileType("binary", suffix)
    if 0 in head:
        encoding = _utf16_without_bom(head)
        if encoding:
            return FileType("wide", encoding, b"", 2)
        return FileType("binary", "NUL bytes")
    if head and len(head) - len(head.translate(None, _CONTROL_BYTES)) > 0.1 * len(head):
        return FileType("binary", "control bytes")
    return FileType("text")
