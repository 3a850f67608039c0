"""Find and redact credential-shaped text in a tree of run artifacts, in place.

`RULES` is the one table of detectors: each row is a literal prefix (or a few), a pattern body,
the group to redact, and a positive and a negative sample that the tests run. Matching is CPython
`re` on bytes, so no file is skipped for failing to decode: latin-1 and broken UTF-8 are scanned
as they are. Because every row starts with a literal, a prefilter finds where prefixes occur and
only those rows are tried, only there. With hyperscan installed the prefilter is one SIMD
multi-pattern pass over each window (about 1 GB/s); with google-re2, one DFA pass (~300 MB/s);
with neither, one substring test per prefix (~20 MB/s on windows, a trie regex on short texts).
The prefilter only narrows: findings are the same. Line numbers are counted with numpy.

Files stream through in ~1 MiB windows cut at newlines. The last `OVERLAP` bytes of a window are
scanned again as the start of the next one, so no match (all are bounded, the longest a PEM block
or a JWT of a few KiB) is cut in half, and memory stays at a few windows whatever the file size.
A redacted span becomes `<redacted:KIND>` followed by the line breaks it contained, so line
numbers stay true; markers are masked before matching and the text around each new marker is
scanned again until clean, so a second run finds nothing. Findings carry kind, path and line,
never the value.
"""
from __future__ import annotations

import argparse
import base64
import codecs
import hashlib
import json
import os
import re
import stat
import string
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Protocol, Sequence
from urllib.parse import quote, quote_plus

import numpy

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import dumps

try:  # optional: only speeds up the prefilter, never decides a finding
    import re2 as _re2
except ImportError:  # pragma: no cover - depends on the environment
    _re2 = None
try:  # optional as well: the fastest prefilter where its wheel installs (x86-64 and arm64 Linux, macOS)
    import hyperscan as _hyperscan
except ImportError:  # pragma: no cover - depends on the environment
    _hyperscan = None

CHUNK_SIZE = 1 << 20
# Longest possible match: a PEM block (header + 16 KiB body + footer) or a JWT (3 x 8 KiB).
OVERLAP = 64 << 10
# How far before the redacted text a match may start (keyword + context), kept from the window before.
CONTEXT = 1 << 10
# Upper bound of any rule's match (PEM: 16 KiB body; JWT: 3 x 8 KiB parts); OVERLAP must exceed it.
MAX_MATCH_LENGTH = 32 << 10
SNIFF_SIZE = 8192
MIN_LITERAL_LENGTH = 8
MAX_SAFETENSORS_HEADER = 100 << 20
ENVIRONMENT_KIND = "environment_credential"
MARKER_PREFIX = b"<redacted:"


# ---------------------------------------------------------------------------------------------
# Value filters: a match is only a finding when the value it would redact passes its rule's filter.

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


def _accept_opaque(value: bytes) -> bool:
    return not _is_placeholder(value)


def _accept_letter_and_digit(value: bytes) -> bool:
    return _has_letter_and_digit(value) and not _is_placeholder(value)


def _accept_two_classes(value: bytes) -> bool:
    classes = sum(pattern.search(value) is not None for pattern in (_UPPER, _LOWER, _DIGIT))
    return len(value) >= 8 and classes >= 2 and not _is_placeholder(value)


def _accept_with_digit(value: bytes) -> bool:
    return _DIGIT.search(value) is not None


def _accept_sk_key(value: bytes) -> bool:
    """The run after the last `-` of a bare `sk-` key mixes letters and digits: `sk-` followed by
    a long word (`sk-` + a hyphenated model name, a slug of letters) or a long number is not one."""
    return _has_letter_and_digit(value[value.rfind(b"-") + 1:])


def _accept_not_example(value: bytes) -> bool:
    return not value.endswith(b"EXAMPLE")


def _accept_aws_secret(value: bytes) -> bool:
    """40 base64 characters with both cases: a git SHA or other hex near `aws` is not one."""
    return _UPPER.search(value) is not None and _LOWER.search(value) is not None


def _accept_generic(value: bytes) -> bool:
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


# ---------------------------------------------------------------------------------------------
# Samples for the table. They are built from pieces at import time so that this file holds no
# string a secret scanner would take for a live credential.

_ALNUM = string.ascii_letters + string.digits
_UPPER_DIGITS = string.ascii_uppercase + string.digits
_BASE64 = _ALNUM + "+/"
_URLSAFE = _ALNUM + "-_"
_HEXDIGITS = "0123456789abcdef"


def _filler(tag: str, length: int, alphabet: str = _ALNUM) -> str:
    """Deterministic characters that look random (SHA-256 of the tag), for samples only."""
    chars: list[str] = []
    counter = 0
    while len(chars) < length:
        digest = hashlib.sha256(f"{tag}:{counter}".encode()).digest()
        chars.extend(alphabet[byte % len(alphabet)] for byte in digest)
        counter += 1
    return "".join(chars[:length])


def _b64url_json(obj: object) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


_S_PEM_LINES = [_filler(f"pem-{i}", 64, _BASE64) for i in range(6)]
_S_PEM = ("-----BEGIN " + "PRIVATE KEY-----\n" + "\n".join(_S_PEM_LINES)
          + "\n-----END " + "PRIVATE KEY-----\n")
_S_CERT = "-----BEGIN " + "CERTIFICATE-----\n" + _S_PEM_LINES[0] + "\n-----END " + "CERTIFICATE-----"
_S_JWT = ".".join((_b64url_json({"alg": "HS256", "typ": "JWT"}),
                   _b64url_json({"sub": "agent-7", "exp": 1767225600}),
                   _filler("jwt-signature", 43, _URLSAFE)))
_S_AKID = "AK" + "IA" + _filler("akid", 16, _UPPER_DIGITS)
_S_AWS_SECRET = _filler("aws-secret", 40, _BASE64)
_S_SIGNATURE = _filler("sigv4", 64, _HEXDIGITS)
_S_HF = "hf" + "_" + _filler("hf", 34)
_S_ANTHROPIC = "sk-" + "ant-api03-" + _filler("anthropic", 93, _URLSAFE) + "AA"
_S_OPENAI = "sk-" + "proj-" + _filler("openai-a", 58, _URLSAFE) + "T3Blbk" + "FJ" + _filler("openai-b", 58, _URLSAFE)
_S_SK_BARE = "sk-" + _filler("sk-bare", 32, _HEXDIGITS)
_S_GITHUB = "gh" + "p_" + _filler("github", 36)
_S_GITHUB_PAT = "github" + "_pat_" + _filler("pat-a", 22) + "_" + _filler("pat-b", 59)
_S_GOOGLE = "AI" + "za" + _filler("google", 35, _URLSAFE)
_S_SLACK = "xo" + "xb-" + "1234567890" + "-" + "9876543210" + "-" + _filler("slack", 24)
_S_SLACK_HOOK = "T0" + _filler("hook-a", 8, _UPPER_DIGITS) + "/B0" + _filler("hook-b", 8, _UPPER_DIGITS) + "/" + _filler("hook-c", 24)
_S_WANDB_V1 = "wandb" + "_v1_" + _filler("wandb-a", 27) + "_" + _filler("wandb-b", 49)
_S_WANDB_HEX = _filler("wandb-hex", 40, _HEXDIGITS)
_S_PASSWORD = _filler("password", 6) + "7" + _filler("password-2", 9)
_S_BEARER = _filler("bearer", 40, _URLSAFE) + "9x"
_S_BASIC = base64.b64encode(b"bot:" + _filler("basic", 16).encode()).decode()
_S_IRIS = _filler("iris", 48, _URLSAFE) + "7"


# ---------------------------------------------------------------------------------------------
# The table.

@dataclass(frozen=True)
class Rule:
    """One detector. Every match starts with one of `prefixes` (in ASCII-lower-cased text when
    `lowercase`), so the rule is skipped for any window that contains none of them."""

    kind: str
    prefixes: tuple[str, ...]
    body: str
    group: int  # 0: redact the whole match; n: redact only group n of the body
    positive: str  # must be found, and `secret` must be gone after redaction
    secret: str
    negative: str  # a look-alike that must not be found
    lowercase: bool = False
    left: str = ""  # "word": not right after [A-Za-z0-9_]; "query": right after ? & or ;
    accept: Callable[[bytes], bool] | None = None  # filter on the bytes to redact
    hint: str = ""  # RE2 continuation after the prefix for the optional prefilter; must match a superset

    @property
    def pattern(self) -> str:
        return "(?:" + "|".join(re.escape(prefix) for prefix in self.prefixes) + ")" + self.body


_SEPARATOR = r"""(?:\\?["'])?[ \t]{0,3}(?::=|=>|[:=])[ \t]{0,3}(?:\\?["'])?"""
_GENERIC_VALUE = r"""([^\s"'`,;(){}\[\]<>\\]{8,1024})"""
_GENERIC_KEYWORDS = (
    "password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "credentials",
    "api_key", "api-key", "apikey", "access_key", "access-key", "accesskey", "secret_key",
    "secret-key", "secretkey", "private_key", "private-key", "privatekey", "auth_key", "authkey",
    "signing_key", "account_key", "accountkey", "encryption_key", "master_key",
)

RULES: tuple[Rule, ...] = (
    Rule(
        kind="pem_private_key",
        prefixes=("-----BEGIN",),
        body=(r"[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
              r"(?:[\s\S]{0,16384}?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
              r"|(?:[A-Za-z0-9+/=\s]|\\[nr]){0,16384})"),
        group=0,
        positive=json.dumps({"tls_key": _S_PEM}),
        secret=_S_PEM_LINES[2],
        negative=_S_CERT,
        hint=r"[ A-Z0-9_-]*PRIVATE KEY",
    ),
    Rule(
        kind="iris_proxy_url",
        prefixes=("iris.oa.dev/proxy/t/",),
        body=r"""([^\s'"/\\<>?#&]{1,4096})""",
        group=1,
        positive=f"agent_url=https://iris.oa.dev/proxy/t/{_S_IRIS}/v1/chat/completions",
        secret=_S_IRIS,
        negative="see https://iris.oa.dev/proxy/status for the proxy health",
        accept=_accept_opaque,
    ),
    Rule(
        kind="presigned_url",
        prefixes=("x-amz-signature=", "x-amz-credential=", "x-amz-security-token=", "awsaccesskeyid=",
                  "x-goog-signature=", "x-goog-credential=", "googleaccessid="),
        body=r"""([^&\s"'<>\\#]{8,8192})""",
        group=1,
        positive=("https://ckpt.s3.us-east-1.amazonaws.com/step_100.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                  f"&X-Amz-Credential={_S_AKID}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
                  "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
                  f"&X-Amz-Signature={_S_SIGNATURE}"),
        secret=_S_SIGNATURE,
        negative="https://ckpt.s3.amazonaws.com/step_100.tar?X-Amz-Expires=3600&versionId=v2",
        lowercase=True,
        accept=_accept_letter_and_digit,
    ),
    Rule(
        kind="presigned_url",
        prefixes=("signature=", "sig="),
        body=r"""([^&\s"'<>\\#]{8,8192})""",
        group=1,
        positive=f"https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA1234&Expires=1700000000&Signature={_S_BEARER}",
        secret=_S_BEARER,
        negative=f"verify(payload, signature={_S_BEARER})",
        lowercase=True,
        left="query",
        accept=_accept_letter_and_digit,
    ),
    Rule(
        kind="aws_access_key_id",
        prefixes=("AKIA", "ASIA", "ABIA", "ACCA"),
        body=r"[A-Z0-9]{16}(?![A-Za-z0-9])",
        group=0,
        positive=f"aws_access_key_id = {_S_AKID}",
        secret=_S_AKID,
        negative="aws_access_key_id = " + "AKIA" + "IOSFODNN7" + "EXAMPLE",
        left="word",
        accept=_accept_not_example,
        hint=r"[A-Z0-9]{16}",
    ),
    Rule(
        kind="aws_secret_access_key",
        prefixes=("aws",),
        body=r"""[\s\S]{0,20}?(?:secret|key|pwd|pass|token)[\s\S]{0,20}?[=:"'\s>]([a-z0-9/+]{40})(?![a-z0-9/+=])""",
        group=1,
        positive=f'AWS_SECRET_ACCESS_KEY="{_S_AWS_SECRET}"',
        secret=_S_AWS_SECRET,
        negative=f"aws_key_commit: {_S_WANDB_HEX}",
        lowercase=True,
        accept=_accept_aws_secret,
        hint=r"[\s\S]{0,20}(?:secret|key|pwd|pass|token)",
    ),
    Rule(
        kind="aws_secret_access_key",
        prefixes=("secret_access_key", "secretaccesskey", "secret-access-key"),
        body=r"""[\s\S]{0,20}?[=:"'\s>]([a-z0-9/+]{40})(?![a-z0-9/+=])""",
        group=1,
        positive=f'{{"AccessKeyId": "{_S_AKID}", "SecretAccessKey": "{_S_AWS_SECRET}"}}',
        secret=_S_AWS_SECRET,
        negative='"SecretAccessKey": "${AWS_SECRET_ACCESS_KEY}"',
        lowercase=True,
        accept=_accept_aws_secret,
    ),
    Rule(
        kind="huggingface_token",
        prefixes=("hf_", "api_org_"),
        body=r"[A-Za-z0-9]{34,40}(?![A-Za-z0-9_])",
        group=0,
        positive=f"HF_TOKEN={_S_HF}",
        secret=_S_HF,
        negative="from huggingface_hub import hf_hub_download; hf_" + "abc",
        left="word",
        hint=r"[A-Za-z0-9]{34}",
    ),
    Rule(
        kind="anthropic_api_key",
        prefixes=("sk-ant-",),
        body=r"[a-z0-9]{2,10}-[A-Za-z0-9_-]{20,400}(?![A-Za-z0-9_-])",
        group=0,
        positive=f'client = Anthropic(api_key="{_S_ANTHROPIC}")',
        secret=_S_ANTHROPIC,
        negative="the sk-" + "ant-api03- prefix marks an Anthropic key",
        left="word",
        hint=r"[a-z0-9]{2,10}-[A-Za-z0-9_-]{20}",
    ),
    Rule(
        kind="openai_api_key",
        prefixes=("sk-",),
        body=(r"(?:(?:proj|svcacct|admin|service)-[A-Za-z0-9_-]{20,400}"
              r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{48})(?![A-Za-z0-9_-])"),
        group=0,
        positive=f"OPENAI_API_KEY={_S_OPENAI}",
        secret=_S_OPENAI,
        negative="pip install scikit-learn; risk-free; task-sk-" + "proj",
        left="word",
        hint=r"(?:(?:proj|svcacct|admin|service)-|[A-Za-z0-9]{20})",
    ),
    Rule(
        # OpenAI-compatible providers and proxies (DeepSeek, LiteLLM, vLLM gateways, OpenRouter's
        # `sk-or-v1-`) issue bare `sk-` keys that no keyword announces. The rule: `sk-` not right
        # after a letter, digit or `_`; at most two short lower-case segments ending in `-`; then
        # 32 to 256 ASCII letters and digits, not followed by a letter, digit, `_` or `-`, with at
        # least one letter and one digit among them. Shorter runs, and runs of only letters or only
        # digits, are not keys.
        kind="openai_compatible_key",
        prefixes=("sk-",),
        body=r"(?:[a-z0-9]{1,8}-){0,2}[A-Za-z0-9]{32,256}(?![A-Za-z0-9_-])",
        group=0,
        positive=f"proxy ready, use {_S_SK_BARE} with base_url=http://gateway:4000/v1",
        secret=_S_SK_BARE,
        negative="sk-" + "abcdefghijklmnopqrstuvwxyzABCDEFGH and sk-" + _filler("sk-short", 31) + " and risk-" + _filler("risk", 40),
        left="word",
        accept=_accept_sk_key,
        hint=r"(?:[a-z0-9]{1,8}-){0,2}[A-Za-z0-9]{32}",
    ),
    Rule(
        kind="github_token",
        prefixes=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        body=r"[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])",
        group=0,
        positive=f"git clone https://{_S_GITHUB}@github.com/org/repo.git",
        secret=_S_GITHUB,
        negative="sigh" + "s_and_" + "ghp" + "_short_" + _filler("gh-neg", 12),
        left="word",
        hint=r"[A-Za-z0-9]{36}",
    ),
    Rule(
        kind="github_token",
        prefixes=("github_pat_",),
        body=r"[A-Za-z0-9_]{50,255}(?![A-Za-z0-9_])",
        group=0,
        positive=f"GITHUB_TOKEN: {_S_GITHUB_PAT}",
        secret=_S_GITHUB_PAT,
        negative="fine-grained tokens start with github" + "_pat_ and are 93 characters",
        left="word",
        hint=r"[A-Za-z0-9_]{50}",
    ),
    Rule(
        kind="google_api_key",
        prefixes=("AIza",),
        body=r"[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        group=0,
        positive=f"https://generativelanguage.googleapis.com/v1/models?key={_S_GOOGLE}",
        secret=_S_GOOGLE,
        negative="AI" + "za" + _filler("google-neg", 20),
        left="word",
        hint=r"[0-9A-Za-z_-]{35}",
    ),
    Rule(
        kind="slack_token",
        prefixes=("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xoxe-", "xapp-"),
        body=r"[0-9A-Za-z-]{10,250}(?![0-9A-Za-z-])",
        group=0,
        positive=f"SLACK_BOT={_S_SLACK}",
        secret=_S_SLACK,
        negative="xo" + "xb-placeholder-value-here",
        left="word",
        accept=_accept_with_digit,
        hint=r"[0-9A-Za-z-]{10}",
    ),
    Rule(
        kind="slack_webhook",
        prefixes=("hooks.slack.com/",),
        body=r"(?:services|workflows|triggers)/([A-Za-z0-9+/_-]{20,250})",
        group=1,
        positive=f"notify: https://hooks.slack.com/services/{_S_SLACK_HOOK}",
        secret=_S_SLACK_HOOK,
        negative="docs at https://hooks.slack.com/ and https://api.slack.com/messaging/webhooks",
        hint=r"(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20}",
    ),
    Rule(
        kind="wandb_api_key",
        prefixes=("wandb_v1_",),
        body=r"[A-Za-z0-9_]{40,200}(?![A-Za-z0-9_])",
        group=0,
        positive=f"WANDB_API_KEY={_S_WANDB_V1}",
        secret=_S_WANDB_V1,
        negative="keys since 0.22.3 start with wandb" + "_v1_ and are 86 characters",
        left="word",
        hint=r"[A-Za-z0-9_]{40}",
    ),
    Rule(
        kind="jwt",
        prefixes=("eyJ",),
        body=r"[A-Za-z0-9_-]{8,8192}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{0,8192}(?![A-Za-z0-9_-])",
        group=0,
        positive=f'{{"capability": "{_S_JWT}"}}',
        secret=_S_JWT.rsplit(".", 1)[1],
        negative=_b64url_json({"alg": "HS256", "typ": "JWT"}) + " is only a JWT header",
        left="word",
        hint=r"[A-Za-z0-9_-]*\.eyJ",
    ),
    Rule(
        kind="url_credentials",
        prefixes=("://",),
        body=r"""([^\s:/?#@'"\\<>]{0,256}):([^\s@/'"\\<>]{1,256})@""",
        group=2,
        positive=f"DATABASE_URL=postgresql://trainer:{_S_PASSWORD}@db.internal:5432/runs",
        secret=_S_PASSWORD,
        negative="https://example.com:8443/path@v2 and postgresql://trainer:${DB_PASSWORD}@db/runs",
        accept=_accept_opaque,
        hint=r"""[^\s/?#@]*:[^\s/@]+@""",
    ),
    Rule(
        kind="netrc_password",
        prefixes=("machine",),
        body=(r"""(?:[ \t]|\\t)+[^\s"'\\]{1,256}(?:\s|\\[nrt])+login(?:\s|\\[nrt])+[^\s"'\\]{1,256}"""
              r"""(?:\s|\\[nrt])+password(?:\s|\\[nrt])+([^\s"'\\<>]{1,1024})"""),
        group=1,
        positive=f"machine github.com\n  login ci-bot\n  password {_S_PASSWORD}\n",
        secret=_S_PASSWORD,
        negative="machine api.wandb.ai login user password ${WANDB_API_KEY}",
        lowercase=True,
        accept=_accept_opaque,
        hint=r"""(?:[ \t]|\\t)+[^\s"'\\]+(?:[\t\n\v\f\r ]|\\[nrt])+login(?:[\t\n\v\f\r ]|\\[nrt])""",
    ),
    Rule(
        kind="wandb_api_key",
        prefixes=("wandb",),
        body=r"[\s\S]{0,40}?(?<![0-9a-z])([0-9a-f]{40})(?![0-9a-z])",
        group=1,
        positive=f"export WANDB_API_KEY={_S_WANDB_HEX}",
        secret=_S_WANDB_HEX,
        negative="wandb: logged artifact sha256:" + _filler("sha", 64, _HEXDIGITS),
        lowercase=True,
        hint=r"[\s\S]{0,40}[0-9a-f]{40}",
    ),
    Rule(
        kind="authorization_header",
        prefixes=("authorization",),
        body=_SEPARATOR + r"""(?:basic|token|digest)\s+([^\s"',;<>\\]{8,4096})""",
        group=1,
        positive=f'{{"Authorization": "Basic {_S_BASIC}"}}',
        secret=_S_BASIC,
        negative='{"Authorization": "Basic <credentials>"}',
        lowercase=True,
        accept=_accept_two_classes,
        hint=r"""(?:\\?["'])?[ \t]{0,3}(?::=|=>|[:=])""",
    ),
    Rule(
        kind="bearer_token",
        prefixes=("bearer",),
        body=r"\s+([a-z0-9._~+/-]{20,4096}=*)",
        group=1,
        positive=f"curl -H 'Authorization: Bearer {_S_BEARER}' https://api.example.com",
        secret=_S_BEARER,
        negative="the cupbearer said: bearer tokens expire after 3600 seconds",
        lowercase=True,
        left="word",
        accept=_accept_letter_and_digit,
        hint=r"[\t\n\v\f\r ]+[a-z0-9._~+/-]{20}",
    ),
    Rule(
        kind="generic_secret",
        prefixes=_GENERIC_KEYWORDS,
        body=_SEPARATOR + _GENERIC_VALUE,
        group=1,
        positive=f'db_password = "{_S_PASSWORD}"',
        secret=_S_PASSWORD,
        negative=("password=${DB_PASSWORD} token: <your-token> api_key=*** secret: " + "<redacted:generic_secret>"
                  ' "eos_token": "<|im_end|>", "max_tokens": 4096, "tokenizer": "Qwen/Qwen3-8B",'
                  ' "api_key_sha256": "' + _filler("ak", 64, _HEXDIGITS) + '"'),
        lowercase=True,
        accept=_accept_generic,
        hint=_SEPARATOR + r"""[^\s"'`,;(){}\[\]<>\\$][^\s"'`,;(){}\[\]<>\\]{7}""",
    ),
    Rule(
        kind="generic_secret",
        prefixes=("-e ", "--env "),
        body=(r"""[ \t]*[a-z0-9_]{0,64}(?:token|secret|password|passwd|api_key|apikey|access_key|secret_key|credentials?)"""
              r"""[ \t]+["']?([^\s"'<>\\]{8,1024})"""),
        group=1,
        positive=f"iris job run -e DB_PASSWORD {_S_PASSWORD} -- python train.py",
        secret=_S_PASSWORD,
        negative="iris job run -e HF_TOKEN ${HF_TOKEN} -e WANDB_MODE online",
        lowercase=True,
        accept=_accept_generic,
        hint=r"[ \t]*[a-z0-9_]*(?:token|secret|passw|api_?key|access_key|secret_key|credential)",
    ),
)

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in RULES)) + (ENVIRONMENT_KIND,)
MAX_PREFIX_LENGTH = max(len(prefix) for rule in RULES for prefix in rule.prefixes)

# Specific kinds win when spans overlap; an exact environment value beats only the generic rules.
_LITERAL_PRIORITY = next(i for i, rule in enumerate(RULES) if rule.kind == "generic_secret") - 0.5


# ---------------------------------------------------------------------------------------------
# Matching one window of bytes.

@dataclass(frozen=True)
class Finding:
    kind: str
    path: str  # relative path inside the scanned root ("" for in-memory text)
    line: int  # 1-based


@dataclass(frozen=True, eq=False)  # hashed by identity: used as a dict key per window
class _Probe:
    """One (rule, prefix) pair: a regex that starts with a literal, so `re` can skip ahead fast."""

    priority: float
    rule: Rule
    needle: bytes
    regex: re.Pattern[bytes]
    reach: int = 0  # bytes a match (with its look-ahead) can span from its start; 0: unbounded


def _reach(pattern: bytes) -> int:
    """The longest text `pattern` can match, plus room for a trailing look-ahead; 0 if unbounded."""
    import re._parser as sre_parse  # noqa: PLC0415 - only at construction; private, but stable since 3.11

    longest = sre_parse.parse(pattern).getwidth()[1]
    return 0 if longest >= 1 << 20 else longest + _LOOKAHEAD_ROOM


_LOOKAHEAD_ROOM = 64


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    priority: float
    kind: str


_WORD_BYTES = frozenset((string.ascii_letters + string.digits + "_").encode())
_MARKER = re.compile(rb"<redacted:[a-z0-9_]{1,64}>")
_LINE_BREAKS = re.compile(rb"[^\r\n]+")


def _count_newlines(data: bytes, start: int, end: int) -> int:
    """`data.count(b"\\n", start, end)`; long ranges through numpy, about three times faster."""
    if end - start < 1 << 16:
        return data.count(b"\n", start, end)
    return int(numpy.count_nonzero(numpy.frombuffer(data, numpy.uint8, end - start, start) == 10))


def _left_boundary_ok(text: bytes, start: int, policy: str) -> bool:
    if not policy or start == 0:
        return True
    previous = text[start - 1]
    if policy == "word":
        if previous not in _WORD_BYTES:
            return True
        # `\n`, `\t` (JSON escapes) or `%2F` (percent-encoding) right before a token is a boundary.
        return (start >= 2 and text[start - 2] == 0x5C) or (start >= 3 and text[start - 3] == 0x25)
    return previous in b"?&;" or text.endswith(b"\\u0026", 0, start) or text.endswith(b"%26", 0, start)


def _mask_markers(text: bytes) -> bytes:
    """Earlier markers become `<###...>` (same length) so no rule can match in or through them."""
    return _MARKER.sub(lambda m: b"<" + b"#" * (len(m.group()) - 2) + b">", text)


def _marker(kind: str, redacted: bytes) -> bytes:
    # The line breaks of the redacted text stay, so every later line keeps its number.
    return b"<redacted:" + kind.encode() + b">" + _LINE_BREAKS.sub(b"", redacted)


def _merge(spans: list[_Span]) -> list[_Span]:
    """Overlapping spans become one, labelled with the most specific kind among them."""
    spans.sort(key=lambda span: (span.start, -span.end))
    merged: list[_Span] = []
    for span in spans:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            best = last if last.priority <= span.priority else span
            merged[-1] = _Span(last.start, max(last.end, span.end), best.priority, best.kind)
        else:
            merged.append(span)
    return merged


def _replace(text: bytes, spans: Sequence[_Span]) -> tuple[bytes, list[tuple[int, int]]]:
    """The text with each span replaced by its marker, and where the markers now are."""
    pieces: list[bytes] = []
    markers: list[tuple[int, int]] = []
    position = 0
    length = 0
    for span in spans:
        kept = text[position:span.start]
        marker = _marker(span.kind, text[span.start:span.end])
        pieces += (kept, marker)
        length += len(kept)
        markers.append((length, length + len(marker)))
        length += len(marker)
        position = span.end
    pieces.append(text[position:])
    return b"".join(pieces), markers


def _neighbourhoods(markers: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Where a new match can start once these markers replaced text: from a match's length before
    a marker (its tail may have changed) to just after it (a boundary may have changed)."""
    ranges: list[tuple[int, int]] = []
    for start, end in markers:
        low, high = max(lo, start - MAX_MATCH_LENGTH), min(hi, end + CONTEXT)
        if ranges and low <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], high))
        elif low < high:
            ranges.append((low, high))
    return ranges


def _literal_forms(values: Iterable[str]) -> tuple[bytes, ...]:
    """Each value as it may appear: raw, percent-encoded (upper and lower hex) and JSON-escaped."""
    forms: set[bytes] = set()
    for value in values:
        for candidate in {value, value.strip()}:
            if len(candidate) < MIN_LITERAL_LENGTH:
                continue
            spellings = (candidate, quote(candidate, safe=""), quote(candidate, safe="/:"),
                         quote_plus(candidate), json.dumps(candidate)[1:-1],
                         json.dumps(candidate, ensure_ascii=False)[1:-1])
            for spelling in spellings:
                encoded = spelling.encode("utf-8", "surrogatepass")
                forms.add(encoded)
                forms.add(re.sub(rb"%[0-9A-F]{2}", lambda m: m.group().lower(), encoded))
    return tuple(sorted((form for form in forms if len(form) >= MIN_LITERAL_LENGTH), key=len, reverse=True))


@dataclass
class _Candidates:
    """What to try: each probe with the positions where its prefix starts (None: scan everything),
    and the literal values that occur."""

    probes: dict[_Probe, list[int] | None] = field(default_factory=dict)
    literals: list[bytes] = field(default_factory=list)
    marker: bool = False  # `<redacted:` occurs: the caller masks markers and asks again


class _Prefilter(Protocol):
    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> _Candidates:
        """A superset of the places where a probe or literal can match in `hay`."""


class _NeedleIndex:
    """Which probes' prefixes (and which literals) start inside a stretch of text."""

    BYTEWISE = 512  # stretches up to this long are checked byte by byte, longer ones per prefix

    def __init__(self, probes: Sequence[_Probe], literals: Sequence[bytes]) -> None:
        by_needle: dict[tuple[bytes, bool], list[_Probe]] = {}
        for probe in probes:
            by_needle.setdefault((probe.needle, probe.rule.lowercase), []).append(probe)
        self._by_needle = tuple(by_needle.items())
        self._by_first_byte: dict[int, list[tuple[bytes, bool, list[_Probe]]]] = {}
        for (needle, lowercase), group in self._by_needle:
            self._by_first_byte.setdefault(needle[:1].lower()[0], []).append((needle, lowercase, group))
        self._literals = tuple(literals)

    def _located(self, hay: bytes, spans: Iterable[tuple[int, int]]) -> _Candidates:
        """The prefixes and literals starting inside the stretches where a prefilter pattern matched.

        Every stdlib match starts at an occurrence of its prefix where the prefilter pattern
        matches too, and a leftmost-first scan that resumes after each match reports a match
        starting at or spanning every such occurrence: so these stretches miss nothing."""
        found = _Candidates()
        literals: set[bytes] = set()
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            literals.update(literal for literal in self._literals
                            if hay.find(literal, start, end + len(literal) - 1) >= 0)
            raw = hay[start:end + MAX_PREFIX_LENGTH]
            lowered = raw.lower()
            if end - start <= self.BYTEWISE:
                for index in range(end - start):
                    for needle, lowercase, group in self._by_first_byte.get(lowered[index], ()):
                        if (lowered if lowercase else raw).startswith(needle, index):
                            for probe in group:
                                found.probes.setdefault(probe, []).append(start + index)  # type: ignore[union-attr]
                continue
            for (needle, lowercase), group in self._by_needle:  # a long stretch: search per prefix
                view = lowered if lowercase else raw
                index = view.find(needle, 0, end - start + len(needle) - 1)
                while index >= 0:
                    for probe in group:
                        found.probes.setdefault(probe, []).append(start + index)  # type: ignore[union-attr]
                    index = view.find(needle, index + 1, end - start + len(needle) - 1)
        for positions in found.probes.values():
            positions.sort()  # type: ignore[union-attr]
        found.literals = sorted(literals, key=len, reverse=True)
        return found


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """An alternation of literals as a trie (`a(?:pi_key|ws)`), which `re` can try quickly at
    each position (a flat alternation of 70 words tries every branch)."""
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = {}

    def emit(node: dict) -> bytes:
        branches = [re.escape(bytes([byte])) + emit(child)
                    for byte, child in sorted((k, v) for k, v in node.items() if k is not None)]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        if None in node:  # a word ends here and a longer one continues: prefer the longer
            return (b"(?:" + body + b")?") if len(branches) == 1 else body + b"?"
        return body

    return emit(trie) or b"(?!)"


class _StdlibPrefilter(_NeedleIndex):
    """Stdlib only. A window: one substring test per distinct prefix, then the triggered probes
    scan all of it. A short text (one field of a trace row): one trie of all prefixes instead."""

    SHORT = 16 << 10
    FEW = 16  # more prefix hits than this in a short text: scanning it per probe is cheaper

    def __init__(self, probes: Sequence[_Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        self._raw = re.compile(_trie_pattern([needle for (needle, lowercase), _ in self._by_needle if not lowercase]
                                             + list(self._literals)))
        self._lower = re.compile(_trie_pattern(needle for (needle, lowercase), _ in self._by_needle if lowercase))

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> _Candidates:
        if MARKER_PREFIX in hay:
            return _Candidates(marker=True)
        if len(hay) <= self.SHORT:
            spans = [m.span() for m in self._raw.finditer(hay)] + [m.span() for m in self._lower.finditer(lowered())]
            if len(spans) <= self.FEW:
                return self._located(hay, spans)
        probes: dict[_Probe, list[int] | None] = {
            probe: None for (needle, lowercase), group in self._by_needle
            if needle in (lowered() if lowercase else hay) for probe in group}
        return _Candidates(probes, [literal for literal in self._literals if literal in hay])


def _re2_bytes_literal(text: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in text)


class _Re2Prefilter(_NeedleIndex):
    """google-re2: one DFA pass of the alternation of every prefix (plus its rule's hint, which
    keeps frequent words like `token` from triggering without a value) and every literal gives
    the few stretches worth a look; there, only the probes whose prefix occurs run. Latin-1 mode
    makes each byte one character, as for `re` on bytes: invalid UTF-8 cannot hide a match."""

    def __init__(self, probes: Sequence[_Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        assert _re2 is not None
        options = _re2.Options()
        options.encoding = _re2.Options.Encoding.LATIN1
        options.max_mem = 64 << 20
        alternatives = [(b"(?i:" if probe.rule.lowercase else b"(?:") + _re2_bytes_literal(probe.needle)
                        + probe.rule.hint.encode() + b")" for probe in probes]
        alternatives += [_re2_bytes_literal(literal) for literal in literals]
        self._regex = _re2.compile(b"|".join(alternatives), options)

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> _Candidates:
        if MARKER_PREFIX in hay:
            return _Candidates(marker=True)
        return self._located(hay, (match.span() for match in self._regex.finditer(hay)))


class _HyperscanPrefilter(_NeedleIndex):
    """Hyperscan: the same alternation as the RE2 prefilter (each prefix plus its rule's hint, and
    every literal), compiled as one multi-pattern database and scanned with SIMD at several times
    RE2's speed. Each pattern reports the leftmost start of every match end, so the reported
    stretches cover every place a prefix and its hint match, as RE2's leftmost-first scan does.
    Without the UTF-8 flag Hyperscan reads bytes, so invalid UTF-8 cannot hide a match."""

    def __init__(self, probes: Sequence[_Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        assert _hyperscan is not None
        expressions = [(b"(?i)" if probe.rule.lowercase else b"") + _re2_bytes_literal(probe.needle)
                       + probe.rule.hint.encode() for probe in probes]
        expressions += [_re2_bytes_literal(literal) for literal in literals]
        self._probe_list, self._literal_list = tuple(probes), tuple(literals)  # by pattern id
        self._marker_id = len(expressions)  # the same pass tells whether markers need masking
        expressions.append(_re2_bytes_literal(MARKER_PREFIX))
        flags = [_hyperscan.HS_FLAG_SOM_LEFTMOST | _hyperscan.HS_FLAG_DOTALL] * len(expressions)
        self._database = _hyperscan.Database()
        self._database.compile(expressions=expressions, ids=list(range(len(expressions))),
                               elements=len(expressions), flags=flags)

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> _Candidates:
        """Each match names its pattern, so only that probe's prefix is looked for in it: at the
        match start (the prefix starts every pattern) and wherever else it recurs in the match
        (a later occurrence may share the match's end, and one end is reported once). Another
        probe's prefix inside the stretch needs no look: where that probe matches, its own
        prefix + hint pattern matches too and is reported."""
        hits: list[tuple[int, int, int]] = []
        marker_id = self._marker_id

        def on_match(pattern: int, start: int, end: int, _flags: int, _context: object) -> bool:
            if pattern == marker_id:
                return True  # stop: the caller masks the markers and scans again
            hits.append((pattern, start, end))
            return False

        if hay:
            try:
                self._database.scan(hay, match_event_handler=on_match)
            except _hyperscan.ScanTerminated:
                return _Candidates(marker=True)
        positions: dict[_Probe, set[int]] = {}
        literals: set[bytes] = set()
        probe_count = len(self._probe_list)
        for pattern, start, end in hits:
            if pattern >= probe_count:
                literals.add(self._literal_list[pattern - probe_count])
                continue
            probe = self._probe_list[pattern]
            found = positions.setdefault(probe, set())
            found.add(start)
            stretch = hay[start:end]
            if probe.rule.lowercase:
                stretch = stretch.lower()
            index = stretch.find(probe.needle, 1)
            while index >= 0:
                found.add(start + index)
                index = stretch.find(probe.needle, index + 1)
        return _Candidates({probe: sorted(found) for probe, found in positions.items()},
                           sorted(literals, key=len, reverse=True))


def _matches(regex: re.Pattern[bytes], subject: bytes, positions: list[int] | None, begin: int, stop: int,
             group: int) -> Iterator[tuple[int, int, int]]:
    """(match start, group start, group end) of every match of `regex` starting in [begin, stop),
    overlapping ones included; with `positions` (where the regex's prefix occurs) the same
    matches, found by trying only there.

    Overlaps matter: in `secret: client_secret = <value>` the match at the first `secret` takes
    `client_secret` as its value and is rejected by the rule's `accept`; the match that starts
    inside it is the real one.
    """
    if positions is None:
        match = regex.search(subject, begin)
        while match is not None and match.start() < stop:
            yield (match.start(), *match.span(group))
            match = regex.search(subject, match.start() + 1)
        return
    for position in positions:
        if position >= stop:
            return
        if position < begin:
            continue
        match = regex.match(subject, position)
        if match is not None:
            yield (position, *match.span(group))


def _lowered_matches(probe: _Probe, hay: bytes, positions: list[int], begin: int, stop: int
                     ) -> Iterator[tuple[int, int, int]]:
    """`_matches` for a case-insensitive rule without lower-casing the whole window: at each
    position only the `probe.reach` bytes a match can span (plus its look-ahead) are lowered,
    which gives the same matches since ASCII lower-casing works byte by byte."""
    group = probe.rule.group
    for position in positions:
        if position >= stop:
            return
        if position < begin:
            continue
        match = probe.regex.match(hay[position:position + probe.reach].lower())
        if match is not None:
            low, high = match.span(group)
            yield (position, position + low, position + high)


def available_engines() -> tuple[str, ...]:
    """"re" always; "re2" when google-re2 (module `re2`, with Latin-1 mode) is importable;
    "hyperscan" when the hyperscan bindings are. The last one is the fastest."""
    has_re2 = _re2 is not None and hasattr(getattr(_re2, "Options", None), "Encoding")
    return ("re",) + (("re2",) if has_re2 else ()) + (("hyperscan",) if _hyperscan is not None else ())


class Redactor:
    """Finds and redacts every rule of RULES plus exact known values (`literals`, e.g. the
    pipeline's own credentials from the environment; values under 8 characters are ignored)."""

    def __init__(self, literals: Iterable[str] = (), *, engine: str = "auto") -> None:
        if engine == "auto":
            engine = available_engines()[-1]
        if engine not in available_engines():
            raise RlkeepError(f"redaction engine {engine!r} is not available (have {', '.join(available_engines())})")
        self.engine = engine
        self._probes = tuple(
            _Probe(float(priority), rule, needle.encode(), re.compile(re.escape(needle.encode()) + rule.body.encode()),
                   _reach(re.escape(needle.encode()) + rule.body.encode()))
            for priority, rule in enumerate(RULES) for needle in rule.prefixes
        )
        self._literals = _literal_forms(literals)
        prefilter_class = {"re": _StdlibPrefilter, "re2": _Re2Prefilter, "hyperscan": _HyperscanPrefilter}[engine]
        self._prefilter: _Prefilter = prefilter_class(self._probes, self._literals)

    def __repr__(self) -> str:  # never the literal values
        return f"Redactor(engine={self.engine!r}, rules={len(RULES)}, literals={len(self._literals)})"

    # -- public, in-memory ------------------------------------------------------------------

    def redact_text(self, text: str) -> tuple[str, list[tuple[int, str]]]:
        """(text with every finding replaced by `<redacted:kind>`, [(line, kind)])."""
        data = text.encode("utf-8", "surrogatepass")
        redacted, findings = self.redact_bytes(data)
        return redacted.decode("utf-8", "surrogatepass"), findings

    def find_in_text(self, text: str) -> list[tuple[int, str]]:
        return self.redact_text(text)[1]

    def redact_bytes(self, data: bytes) -> tuple[bytes, list[tuple[int, str]]]:
        out, _, findings = self._redact_region(data, 0, len(data), 1)
        return (data if out is None else out), findings

    # -- windows ---------------------------------------------------------------------------

    def _find_spans(self, text: bytes, lo: int, hi: int, start: int = 0, stop: int | None = None) -> list[_Span]:
        """Merged spans to redact whose start lies in [lo, hi). Only text[start:stop] is looked
        at: matches may begin up to CONTEXT before lo and run up to OVERLAP past hi."""
        stop = len(text) if stop is None else stop
        hay = text if start == 0 and stop == len(text) else text[start:stop]
        lowered_cache: list[bytes] = []

        def lowered() -> bytes:
            if not lowered_cache:
                lowered_cache.append(hay.lower())
            return lowered_cache[0]

        spans: list[_Span] = []
        first, last = lo - start, hi - start  # [lo, hi) in hay coordinates
        scan_from = max(0, first - CONTEXT)
        candidates = self._prefilter.candidates(hay, lowered)
        if candidates.marker:
            hay = _mask_markers(hay)
            lowered_cache.clear()
            candidates = self._prefilter.candidates(hay, lowered)
        for probe, positions in candidates.probes.items():
            rule = probe.rule
            if rule.lowercase and positions is not None and probe.reach:
                found = _lowered_matches(probe, hay, positions, scan_from, last)
            else:
                found = _matches(probe.regex, lowered() if rule.lowercase else hay, positions, scan_from, last,
                                 rule.group)
            for match_start, begin, end in found:
                if begin < first or begin >= last or begin == end:
                    continue
                if rule.left and not _left_boundary_ok(hay, match_start, rule.left):
                    continue
                if rule.accept is not None and not rule.accept(hay[begin:end]):
                    continue
                spans.append(_Span(start + begin, start + end, probe.priority, rule.kind))
        for literal in candidates.literals:
            position = hay.find(literal, first, last + len(literal) - 1)
            while position >= 0:
                spans.append(_Span(start + position, start + position + len(literal), _LITERAL_PRIORITY,
                                   ENVIRONMENT_KIND))
                position = hay.find(literal, position + 1, last + len(literal) - 1)
        return _merge(spans)

    def _redact_region(self, window: bytes, lo: int, cut: int, first_line: int
                       ) -> tuple[bytes | None, int, list[tuple[int, str]]]:
        """Redact spans starting in window[lo:cut]; a span crossing `cut` extends the region.

        Returns (redacted region or None if unchanged, end of the region in `window`, findings).
        Around each new marker the text is scanned again until clean: removing one secret can
        bring another within reach of a context rule (e.g. a second 40-hex key near `wandb`)."""
        spans = self._find_spans(window, lo, cut)
        if not spans:
            return None, cut, []
        text = window
        region_end = cut  # end of the region in `text`
        original_end = cut  # the same point in `window`: text[region_end:] == window[original_end:]
        findings: list[tuple[int, str]] = []
        for _ in range(32):
            line, counted_to = first_line, lo
            for span in spans:
                line += _count_newlines(text, counted_to, span.start)
                counted_to = span.start
                findings.append((line, span.kind))
            reach = max(region_end, spans[-1].end)
            original_end += reach - region_end
            text, markers = _replace(text, spans)
            region_end = len(text) - (len(window) - original_end)
            spans = _merge([span for low, high in _neighbourhoods(markers, lo, region_end)
                            for span in self._find_spans(text, low, high, max(0, low - CONTEXT),
                                                         min(len(text), high + MAX_MATCH_LENGTH))])
            if not spans:
                return text[lo:region_end], original_end, findings
        raise RuntimeError("redaction did not settle after 32 rounds")  # pragma: no cover

    def _redact_stream(self, read: Callable[[int], bytes], sink: _Sink | None,
                       chunk_size: int = CHUNK_SIZE, overlap: int = OVERLAP) -> list[tuple[int, str]]:
        """Scan (and, with a sink, rewrite) a byte stream window by window in bounded memory."""
        findings: list[tuple[int, str]] = []
        context = b""  # final text just before the window: matches may start in it
        carry = b""  # read but not yet committed
        line = 1
        while True:
            data = read(chunk_size)
            at_end = not data
            window = b"".join((context, carry, data))
            lo = len(context)
            if at_end:
                cut = len(window)
            else:
                limit = len(window) - overlap
                if limit <= lo:
                    carry = window[lo:]
                    continue
                newline = window.rfind(b"\n", lo, limit)
                cut = newline + 1 if newline >= 0 else limit
            out, end, found = self._redact_region(window, lo, cut, line)
            findings.extend(found)
            line += _count_newlines(window, lo, end)
            if sink is not None:
                sink.emit(memoryview(window)[lo:end], out)
            if out is None:
                context = window[max(0, end - CONTEXT):end]
            elif len(out) >= CONTEXT:
                context = out[-CONTEXT:]
            else:
                context = (window[max(0, lo - CONTEXT):lo] + out)[-CONTEXT:]
            carry = window[end:]
            if at_end:
                return findings


ENV_CREDENTIAL_NAMES = frozenset({
    "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN",
})
ENV_CREDENTIAL_SUFFIXES = ("_TOKEN", "_SECRET", "_PASSWORD", "_API_KEY", "_SECRET_KEY")


def credential_variable_names(environ: Mapping[str, str]) -> list[str]:
    """The variables whose values are the pipeline's own credentials."""
    return sorted(name for name in environ
                  if name in ENV_CREDENTIAL_NAMES or name.upper().endswith(ENV_CREDENTIAL_SUFFIXES))


def redactor_from_environment(environ: Mapping[str, str] | None = None) -> Redactor:
    """A Redactor that also redacts the exact values of the credentials in the environment."""
    env = os.environ if environ is None else environ
    return Redactor(env[name] for name in credential_variable_names(env) if len(env[name]) >= MIN_LITERAL_LENGTH)


# ---------------------------------------------------------------------------------------------
# Writing in place: a temp file in the same directory, then os.replace; untouched files are not
# rewritten at all.

class _Sink(Protocol):
    def emit(self, original: memoryview, redacted: bytes | None) -> None: ...
    def finish(self) -> bool: ...
    def abort(self) -> None: ...


def _temp_beside(path: Path) -> tuple[int, str]:
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".redacting", dir=path.parent)


def _install(tmp: str, handle: BinaryIO, path: Path, mode: int) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.chmod(tmp, stat.S_IMODE(mode))
    os.replace(tmp, path)


class _LazyRewriter:
    """Opens the temp file at the first change, copying the unchanged prefix from the source."""

    def __init__(self, path: Path, source_fd: int, mode: int) -> None:
        self._path, self._source_fd, self._mode = path, source_fd, mode
        self._unchanged = 0
        self._tmp: str | None = None
        self._handle: BinaryIO | None = None

    def emit(self, original: memoryview, redacted: bytes | None) -> None:
        if redacted is None and self._handle is None:
            self._unchanged += len(original)
            return
        if self._handle is None:
            fd, self._tmp = _temp_beside(self._path)
            self._handle = os.fdopen(fd, "wb")
            copied = 0
            while copied < self._unchanged:
                block = os.pread(self._source_fd, min(CHUNK_SIZE, self._unchanged - copied), copied)
                if not block:
                    raise RlkeepError(f"{self._path}: file shrank while it was being redacted")
                self._handle.write(block)
                copied += len(block)
        self._handle.write(original if redacted is None else redacted)

    def finish(self) -> bool:
        if self._handle is None or self._tmp is None:
            return False
        _install(self._tmp, self._handle, self._path, self._mode)
        self._handle = None
        return True

    def abort(self) -> None:
        if self._handle is not None:
            self._handle.close()
        if self._tmp is not None:
            Path(self._tmp).unlink(missing_ok=True)


class _TranscodingRewriter:
    """For UTF-16/32 files: everything is written back in the file's encoding; kept only if changed."""

    def __init__(self, path: Path, encoding: str, bom: bytes, mode: int) -> None:
        self._path, self._encoding, self._mode = path, encoding, mode
        fd, self._tmp = _temp_beside(path)
        self._handle: BinaryIO | None = os.fdopen(fd, "wb")
        self._handle.write(bom)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogatepass")
        self._changed = False
        self.trailing = b""

    def emit(self, original: memoryview, redacted: bytes | None) -> None:
        assert self._handle is not None
        self._changed = self._changed or redacted is not None
        text = self._decoder.decode(bytes(original) if redacted is None else redacted)
        self._handle.write(text.encode(self._encoding, "surrogatepass"))

    def finish(self) -> bool:
        assert self._handle is not None
        self._handle.write(self._decoder.decode(b"", final=True).encode(self._encoding, "surrogatepass"))
        self._handle.write(self.trailing)
        if not self._changed:
            self.abort()
            return False
        _install(self._tmp, self._handle, self._path, self._mode)
        self._handle = None
        return True

    def abort(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        Path(self._tmp).unlink(missing_ok=True)


class _TranscodingReader:
    """Reads UTF-16/32 code units and hands out UTF-8 (lone surrogates pass through both ways)."""

    def __init__(self, handle: BinaryIO, encoding: str, unit: int) -> None:
        self._handle, self._encoding, self._unit = handle, encoding, unit
        self.trailing = b""  # an incomplete last code unit, written back unchanged

    def read(self, size: int) -> bytes:
        size -= size % self._unit
        data = self._handle.read(size)
        if len(data) % self._unit:
            cut = len(data) - len(data) % self._unit
            data, self.trailing = data[:cut], data[cut:]
        return data.decode(self._encoding, "surrogatepass").encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------------
# What a file is: text (scanned as bytes), UTF-16/32 text, a safetensors file, or binary.

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
class _FileType:
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


def classify(name: str, head: bytes, size: int) -> _FileType:
    """Decide from the name and the first SNIFF_SIZE bytes how a file is scanned."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix == ".safetensors" or _safetensors_header_length(head, size) is not None:
        if _safetensors_header_length(head, size) is None:
            return _FileType("binary", "safetensors with an unreadable header")
        return _FileType("safetensors")
    for bom, encoding, unit in _BOMS:
        if head.startswith(bom):
            return _FileType("wide", encoding, bom, unit)
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return _FileType("binary", what)
    if len(head) > 262 and head[257:262] == b"ustar":
        return _FileType("binary", "tar")
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return _FileType("binary", "pickle")
    if suffix in BINARY_SUFFIXES:
        return _FileType("binary", suffix)
    if 0 in head:
        encoding = _utf16_without_bom(head)
        if encoding:
            return _FileType("wide", encoding, b"", 2)
        return _FileType("binary", "NUL bytes")
    if head and len(head) - len(head.translate(None, _CONTROL_BYTES)) > 0.1 * len(head):
        return _FileType("binary", "control bytes")
    return _FileType("text")


# ---------------------------------------------------------------------------------------------
# The tree.

@dataclass
class TreeReport:
    findings: list[Finding] = field(default_factory=list)
    files_scanned: int = 0
    files_skipped: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "findings": [{"kind": f.kind, "path": f.path, "line": f.line} for f in self.findings],
            "files_scanned": self.files_scanned,
            "files_skipped": [{"path": path, "reason": reason} for path, reason in self.files_skipped],
        }


@dataclass(frozen=True)
class _FileOutcome:
    findings: list[tuple[int, str]]
    skipped_reason: str | None = None
    rewritten: bool = False


def _scan_stream_file(path: Path, source: BinaryIO, kind: _FileType, redactor: Redactor, check: bool,
                      mode: int) -> _FileOutcome:
    source.seek(len(kind.bom))
    if kind.handling == "wide":
        reader = _TranscodingReader(source, kind.detail, kind.unit)
        sink: _Sink | None = None if check else _TranscodingRewriter(path, kind.detail, kind.bom, mode)
        read: Callable[[int], bytes] = reader.read
    else:
        sink = None if check else _LazyRewriter(path, source.fileno(), mode)
        read = source.read
    try:
        findings = redactor._redact_stream(read, sink)
        if isinstance(sink, _TranscodingRewriter):
            sink.trailing = reader.trailing
        rewritten = sink.finish() if sink is not None else False
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    return _FileOutcome(findings, rewritten=rewritten)


SAFETENSORS_REASON = "tensor data not scanned: binary (safetensors; JSON header scanned)"


def _scan_safetensors(path: Path, rel: str, source: BinaryIO, redactor: Redactor, check: bool,
                      mode: int) -> _FileOutcome:
    source.seek(0)
    header_length = int.from_bytes(source.read(8), "little")
    header = source.read(header_length)
    redacted, findings = redactor.redact_bytes(header)
    if not findings or check:
        return _FileOutcome(findings, SAFETENSORS_REASON)
    try:
        json.loads(redacted)
    except ValueError:
        raise RlkeepError(f"{rel}: redacting the safetensors header would break its JSON; file left as it was") from None
    if len(redacted) <= header_length:
        redacted = redacted.ljust(header_length, b" ")  # same data offsets
    else:
        redacted += b" " * (-len(redacted) % 8)
    fd, tmp = _temp_beside(path)
    handle = os.fdopen(fd, "wb")
    try:
        handle.write(len(redacted).to_bytes(8, "little"))
        handle.write(redacted)
        source.seek(8 + header_length)
        while block := source.read(CHUNK_SIZE):
            handle.write(block)
        _install(tmp, handle, path, mode)
    except BaseException:
        handle.close()
        Path(tmp).unlink(missing_ok=True)
        raise
    return _FileOutcome(findings, SAFETENSORS_REASON, rewritten=True)


def scan_file(path: Path, rel: str, redactor: Redactor, *, check: bool) -> _FileOutcome:
    """Scan one regular file (and redact it in place unless `check`)."""
    try:
        with open(path, "rb") as source:
            info = os.fstat(source.fileno())
            kind = classify(path.name, source.read(SNIFF_SIZE), info.st_size)
            if kind.handling == "binary":
                return _FileOutcome([], f"not scanned: binary ({kind.detail})")
            if kind.handling == "safetensors":
                return _scan_safetensors(path, rel, source, redactor, check, info.st_mode)
            return _scan_stream_file(path, source, kind, redactor, check, info.st_mode)
    except OSError as error:
        raise RlkeepError(f"{rel}: cannot {'scan' if check else 'redact'}: {error.strerror or error}") from None


def _walk(root: Path) -> Iterator[tuple[Path, str, str | None]]:
    """(path, relative path, reason it is not a regular file or None), in a stable order."""
    if not root.is_dir():
        yield root, root.name, None
        return
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        base = Path(directory)
        for name in list(dirnames):
            if (base / name).is_symlink():
                dirnames.remove(name)
                yield base / name, (base / name).relative_to(root).as_posix(), "not scanned: symlink"
        for name in sorted(filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                yield path, rel, "not scanned: symlink"
            elif not stat.S_ISREG(mode):
                yield path, rel, "not scanned: not a regular file"
            else:
                yield path, rel, None


def redact_tree(root: str | Path, redactor: Redactor, *, check: bool = False) -> TreeReport:
    """Redact every file under `root` in place (with `check`, only report). Every file ends up
    either counted in files_scanned or listed in files_skipped with its reason."""
    root = Path(root)
    if not root.exists():
        raise RlkeepError(f"{root}: no such file or directory")
    report = TreeReport()
    for path, rel, not_regular in _walk(root):
        if not_regular:
            report.files_skipped.append((rel, not_regular))
            continue
        outcome = scan_file(path, rel, redactor, check=check)
        report.findings.extend(Finding(kind, rel, line) for line, kind in outcome.findings)
        if outcome.skipped_reason:
            report.files_skipped.append((rel, outcome.skipped_reason))
        else:
            report.files_scanned += 1
        if outcome.rewritten:
            report.files_rewritten.append(rel)
    return report


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep redact",
        description="Redact credential-shaped text under ROOT in place; print the findings as JSON "
                    "(kind, path, line; never the value).")
    parser.add_argument("root", help="directory (or single file) to redact")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if credential-shaped text remains")
    args = parser.parse_args(argv)
    report = redact_tree(args.root, redactor_from_environment(), check=args.check)
    sys.stdout.write(dumps(report.to_json()))
    if args.check and report.findings:
        print(f"rlkeep: credential-shaped text remains under {args.root}: {len(report.findings)} finding(s)",
              file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Tars: the archive is a destination too, so what goes into it passes through the same redaction.


def redact_tar(source_tar: str | Path, dest_tar: str | Path, redactor: Redactor, *, work_dir: str | Path) -> dict:
    """Copy a tar member by member, redacting every text member (binary members are copied as
    they are and counted), keeping member names, order and metadata. Returns the findings
    (kind, member, line; never the value). dest_tar appears only when complete."""
    import shutil
    import tarfile

    source_tar, dest_tar, work_dir = Path(source_tar), Path(dest_tar), Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    partial = dest_tar.with_name(f".{dest_tar.name}.part")
    findings: list[dict] = []
    members = binary = 0
    try:
        with tarfile.open(source_tar, "r:*") as src, tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                if not member.isfile():
                    dst.addfile(member)
                    continue
                members += 1
                scratch = work_dir / Path(member.name).name  # the name matters for classification
                with src.extractfile(member) as body, open(scratch, "wb") as handle:  # type: ignore[union-attr]
                    shutil.copyfileobj(body, handle, CHUNK_SIZE)
                outcome = scan_file(scratch, member.name, redactor, check=False)
                if outcome.skipped_reason and not outcome.findings:
                    binary += 1
                findings += [{"kind": kind, "member": member.name, "line": line} for line, kind in outcome.findings]
                copy = tarfile.TarInfo(member.name)
                copy.size = scratch.stat().st_size
                copy.mtime, copy.mode, copy.uid, copy.gid = member.mtime, member.mode, member.uid, member.gid
                copy.uname, copy.gname = member.uname, member.gname
                with open(scratch, "rb") as handle:
                    dst.addfile(copy, handle)
                scratch.unlink()
        os.replace(partial, dest_tar)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return {"source": str(source_tar), "members": members, "binary_members": binary,
            "members_redacted": len({f["member"] for f in findings}), "findings": findings}
