"""Fake credentials planted in the example run, so tests can prove none reaches a destination.

Every value is assembled from pieces at run time: this file holds no credential-shaped
literal for a scanner (or a redaction pass over the repository) to trip on.
"""
from __future__ import annotations

import base64
import json
import random
import string
import textwrap
from dataclasses import dataclass, field

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
BASE64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def _mixed(rng: random.Random, alphabet: str, length: int) -> str:
    """A random string with at least one letter and one digit (generic detectors require both)."""
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(length))
        if any(c.isalpha() for c in value) and any(c.isdigit() for c in value):
            return value


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class FakeCredentials:
    hf_token: str
    wandb_key: str
    aws_key_id: str
    aws_secret: str
    presign_key_id: str
    presign_signature: str
    iris_token: str
    github_token: str
    openai_key: str
    pem: str
    pem_body_line: str
    password: str


def make_credentials(seed: int) -> FakeCredentials:
    rng = random.Random(f"{seed}/credentials")
    akia = "AK" + "IA"
    header = json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode()
    payload = json.dumps(
        {"sub": "proxy", "aud": "iris", "exp": 1775494800, "tid": _mixed(rng, ALNUM, 12)},
        separators=(",", ":"),
    ).encode()
    key_material = bytes(rng.randrange(256) for _ in range(288))
    body_lines = textwrap.wrap(base64.b64encode(key_material).decode("ascii"), 64)
    marker = "PRIVATE" + " KEY-----"
    pem = "\n".join(["-----BEGIN " + marker, *body_lines, "-----END " + marker]) + "\n"
    return FakeCredentials(
        hf_token="h" + "f_" + _mixed(rng, ALNUM, 34),
        wandb_key=_mixed(rng, HEX, 40),
        aws_key_id=akia + _mixed(rng, UPPER_DIGITS, 16),
        aws_secret=_mixed(rng, BASE64, 40),
        presign_key_id=akia + _mixed(rng, UPPER_DIGITS, 16),
        presign_signature=_mixed(rng, HEX, 64),
        iris_token=".".join([_b64url(header), _b64url(payload), _b64url(rng.randbytes(32))]),
        github_token="gh" + "p_" + _mixed(rng, ALNUM, 36),
        openai_key="sk" + "-proj-" + _mixed(rng, ALNUM, 74) + "T3Blbk" + "FJ" + _mixed(rng, ALNUM, 74),
        pem=pem,
        pem_body_line=max(body_lines[:-1], key=len),
        password=_mixed(rng, ALNUM, 20),
    )


@dataclass
class PlantedSecrets:
    """The ledger: every planted value with the store-relative file holding it verbatim."""

    entries: list[dict] = field(default_factory=list)

    def plant(self, kind: str, path: str, value: str) -> str:
        self.entries.append({"kind": kind, "path": path, "value": value})
        return value
