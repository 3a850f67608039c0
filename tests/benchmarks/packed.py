"""The redaction benchmark's packed corpus: the plain corpus as a run leaves it once rotated and
packed (compressed members), and the figures of scanning both side by side."""
from __future__ import annotations

import gzip
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Callable

import zstandard


def pack(corpus: Path, packed: Path) -> None:
    """The same files as a run leaves them once rotated and packed: a gzip-rotated trainer log, zstd
    metrics, the traces as a tar.gz, result.json and the config in a zip. Same secrets, same lines."""
    (packed / "trainer").mkdir(parents=True)
    (packed / "trainer" / "train.log.1.gz").write_bytes(
        gzip.compress((corpus / "trainer" / "train.log").read_bytes(), compresslevel=6, mtime=0))
    with open(corpus / "trainer" / "metrics.jsonl", "rb") as source, \
            open(packed / "trainer" / "metrics.jsonl.zst", "wb") as out:
        zstandard.ZstdCompressor().copy_stream(source, out)
    with tarfile.open(packed / "traces.tar.gz", "w:gz") as tar:
        tar.add(corpus / "traces", arcname="traces")
    with zipfile.ZipFile(packed / "outputs.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(corpus / "result.json", "result.json")
        archive.write(corpus / "config.yaml", "config.yaml")


def figures(work: Path, corpus: Path, scan_child: Callable[[Path], dict], plain: dict) -> dict:
    """The plain corpus beside its packed copy (compressed members): MB of text per CPU-second over
    both, the share of those bytes read through a decompressor, and the packed copy's findings
    against the plain one's (the same count by kind)."""
    mixed = work / "mixed"
    shutil.copytree(corpus, mixed / "plain")
    pack(corpus, mixed / "packed")
    scan = scan_child(mixed)
    text_bytes = 2 * sum(p.stat().st_size for p in corpus.rglob("*") if p.is_file())
    by_kind = lambda findings, prefix: sorted(f["kind"] for f in findings if f["path"].startswith(prefix))  # noqa: E731
    shutil.rmtree(mixed, ignore_errors=True)
    return {"mixed_corpus_mb": round(text_bytes / 1e6, 1),
            "mixed_mb_per_s": round(text_bytes / 1e6 / scan["cpu_seconds"], 1),
            "mixed_decompressed_share": round(scan["bytes_decompressed"] / text_bytes, 3),
            "packed_same_findings_as_plain": by_kind(scan["findings"], "packed/") == sorted(
                f["kind"] for f in plain["findings"]) and not scan["unreadable"]}
