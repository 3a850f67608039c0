"""Samples for the rule table. They are built from pieces at import time so that no file of this
package holds a string a secret scanner would take for a live credential."""
from __future__ import annotations

import base64
import hashlib
import json
import string

_ALNUM = string.ascii_letters + string.digits
_UPPER_DIGITS = string.ascii_uppercase + string.digits
_BASE64 = _ALNUM + "+/"
_URLSAFE = _ALNUM + "-_"
HEXDIGITS = "0123456789abcdef"


def filler(tag: str, length: int, alphabet: str = _ALNUM) -> str:
    """Deterministic characters that look random (SHA-256 of the tag), for samples only."""
    chars: list[str] = []
    counter = 0
    while len(chars) < length:
        digest = hashlib.sha256(f"{tag}:{counter}".encode()).digest()
        chars.extend(alphabet[byte % len(alphabet)] for byte in digest)
        counter += 1
    return "".join(chars[:length])


def b64url_json(obj: object) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


PEM_LINES = [filler(f"pem-{i}", 64, _BASE64) for i in range(6)]
PEM = ("-----BEGIN " + "PRIVATE KEY-----\n" + "\n".join(PEM_LINES)
       + "\n-----END " + "PRIVATE KEY-----\n")
CERT = "-----BEGIN " + "CERTIFICATE-----\n" + PEM_LINES[0] + "\n-----END " + "CERTIFICATE-----"
JWT = ".".join((b64url_json({"alg": "HS256", "typ": "JWT"}),
                b64url_json({"sub": "agent-7", "exp": 1767225600}),
                filler("jwt-signature", 43, _URLSAFE)))
AKID = "AK" + "IA" + filler("akid", 16, _UPPER_DIGITS)
AWS_SECRET = filler("aws-secret", 40, _BASE64)
SIGNATURE = filler("sigv4", 64, HEXDIGITS)
HF = "hf" + "_" + filler("hf", 34)
ANTHROPIC = "sk-" + "ant-api03-" + filler("anthropic", 93, _URLSAFE) + "AA"
OPENAI = "sk-" + "proj-" + filler("openai-a", 58, _URLSAFE) + "T3Blbk" + "FJ" + filler("openai-b", 58, _URLSAFE)
SK_BARE = "sk-" + filler("sk-bare", 32, HEXDIGITS)
GITHUB = "gh" + "p_" + filler("github", 36)
GITHUB_PAT = "github" + "_pat_" + filler("pat-a", 22) + "_" + filler("pat-b", 59)
GOOGLE = "AI" + "za" + filler("google", 35, _URLSAFE)
SLACK = "xo" + "xb-" + "1234567890" + "-" + "9876543210" + "-" + filler("slack", 24)
SLACK_HOOK = "T0" + filler("hook-a", 8, _UPPER_DIGITS) + "/B0" + filler("hook-b", 8, _UPPER_DIGITS) + "/" + filler("hook-c", 24)
WANDB_V1 = "wandb" + "_v1_" + filler("wandb-a", 27) + "_" + filler("wandb-b", 49)
WANDB_HEX = filler("wandb-hex", 40, HEXDIGITS)
PASSWORD = filler("password", 6) + "7" + filler("password-2", 9)
BEARER = filler("bearer", 40, _URLSAFE) + "9x"
BASIC = base64.b64encode(b"bot:" + filler("basic", 16).encode()).decode()
IRIS = filler("iris", 48, _URLSAFE) + "7"
