"""The server's Xet storage: hf_xet's disk-backed CAS behind a `local://<dir>` URL (xet-core:
xet_data/src/processing/configurations.rs), which the unmodified client uploads to and downloads
from once the token endpoints name it. Client and server share the filesystem.

The server reads what the client wrote: the MDB shards under <dir>/xet/xorbs/shards map each
uploaded file's sha256 to its Xet file hash (xet-core: xet_core_structures/src/metadata_shard/
shard_format.rs, file_structs.rs), and a commit naming that sha256 has the file reconstructed by
hf_xet into the server's LFS store, so downloads by plain HTTP and the secret scans of
`stored_blobs` see every byte as in LFS mode. `received_bytes` is what the CAS holds in xorbs: the
bytes uploads moved.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

ACCESS_TOKEN = "rlkeep-dev-xet"  # the local CAS checks no token; the client needs one to hold
TOKEN_LIFETIME = 3600  # seconds
_ENTRY = 48  # bytes of every MDB shard header, file header, segment and extension entry
_BOOKEND = b"\xff" * 32
_HAS_VERIFICATION = 1 << 31
_HAS_METADATA_EXTENSION = 1 << 30


def merkle_hex(raw: bytes) -> str:
    """A 32-byte hash as xet-core prints it (MerkleHash::hex): four little-endian u64, %016x each."""
    return "".join(f"{value:016x}" for value in struct.unpack("<4Q", raw))


def shard_files(data: bytes) -> dict[str, str]:
    """sha256 -> Xet file hash of every file an MDB shard describes with its sha256 extension."""
    found: dict[str, str] = {}
    offset = _ENTRY  # the shard header
    while offset + _ENTRY <= len(data):
        file_hash = data[offset:offset + 32]
        flags, entries = struct.unpack("<II", data[offset + 32:offset + 40])
        offset += _ENTRY
        if file_hash == _BOOKEND:
            break
        offset += _ENTRY * entries * (2 if flags & _HAS_VERIFICATION else 1)
        if flags & _HAS_METADATA_EXTENSION:
            found[merkle_hex(data[offset:offset + 32])] = merkle_hex(file_hash)
            offset += _ENTRY
    return found


class XetCas:
    """The local CAS directory the token endpoints name, and what the server reads from it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"local://{self.directory}"

    def token(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The token endpoints' answer: its JSON body and the same facts as X-Xet-* headers."""
        expires = int(time.time()) + TOKEN_LIFETIME
        body = {"casUrl": self.url, "accessToken": ACCESS_TOKEN, "exp": expires}
        headers = {"X-Xet-Cas-Url": self.url, "X-Xet-Access-Token": ACCESS_TOKEN,
                   "X-Xet-Token-Expiration": str(expires)}
        return body, headers

    def _store(self) -> Path:
        return self.directory / "xet" / "xorbs"

    def received_bytes(self) -> int:
        """Bytes of every xorb the CAS holds: what uploads have moved into it."""
        xorbs = self._store() / "xorbs"
        return sum(path.stat().st_size for path in xorbs.glob("*") if path.is_file() and path.suffix != ".tagset")

    def file_hash(self, sha256: str) -> str | None:
        """The Xet file hash of the uploaded file with this sha256, if a shard names it."""
        for shard in sorted((self._store() / "shards").glob("*.mdb")):
            found = shard_files(shard.read_bytes()).get(sha256)
            if found is not None:
                return found
        return None

    def reconstruct(self, file_hash: str, size: int, dest: Path) -> None:
        """Write the file with this Xet hash to `dest`, by hf_xet from the local CAS."""
        import hf_xet  # only in Xet mode

        session = hf_xet.XetSession()
        with session.new_file_download_group(endpoint=self.url, token=ACCESS_TOKEN,
                                              token_expiry_unix_secs=int(time.time()) + TOKEN_LIFETIME) as group:
            group.start_download_file(hf_xet.XetFileInfo(file_hash, size), str(dest))
