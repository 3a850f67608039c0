"""Realistic fake credentials of every kind `rlkeep.redaction` detects, for planting in test data.

Deterministic for a given `random.Random`: `plant(kind, rng)` gives the text to plant (the
credential with whatever context its kind needs, e.g. `aws_secret_access_key = ...`) and the part
that must not survive redaction. Prefixes are assembled from pieces so this file holds no string a
secret scanner would take for a live credential.

    rng = random.Random(7)
    planted = plant("huggingface_token", rng)
    line = json.dumps({"msg": f"token is {planted.text}"})
"""
from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass
from typing import Callable

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
BASE64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Planted:
    kind: str
    text: str  # what to put in the file
    secret: str  # the sensitive part: it must be gone after redaction


def chars(rng: random.Random, length: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def mixed(rng: random.Random, length: int, alphabet: str = ALNUM) -> str:
    """Random characters with at least one letter and one digit (what a real token looks like)."""
    while True:
        value = chars(rng, length, alphabet)
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


def opaque_value(rng: random.Random, length: int = 24) -> str:
    """A credential-like value that matches no detector pattern (only exact-value redaction finds it)."""
    return "q" + mixed(rng, length - 1, string.ascii_lowercase + string.digits)


def _b64url_json(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()


def _pem(rng: random.Random) -> Planted:
    label = rng.choice(["", "RSA ", "EC ", "OPENSSH "])
    lines = [chars(rng, 64, BASE64) for _ in range(rng.randint(4, 20))]
    text = (f"-----BEGIN {label}" + "PRIVATE KEY-----\n" + "\n".join(lines)
            + f"\n-----END {label}" + "PRIVATE KEY-----")
    return Planted("pem_private_key", text, lines[len(lines) // 2])


def _jwt(rng: random.Random) -> Planted:
    token = ".".join((_b64url_json({"alg": "HS256", "typ": "JWT"}),
                      _b64url_json({"sub": f"agent-{rng.randint(1, 999)}", "exp": rng.randint(1_700_000_000, 1_900_000_000),
                                    "scope": "proxy"}),
                      chars(rng, 43, URLSAFE)))
    return Planted("jwt", token, token.rsplit(".", 1)[1])


def _iris(rng: random.Random) -> Planted:
    token = mixed(rng, 48, URLSAFE)
    return Planted("iris_proxy_url", f"https://iris.oa.dev/proxy/t/{token}/v1/chat/completions", token)


def _akid(rng: random.Random) -> str:
    return rng.choice(["AK" + "IA", "AS" + "IA"]) + mixed(rng, 16, UPPER_DIGITS)


def _presigned(rng: random.Random) -> Planted:
    signature = chars(rng, 64, HEX)
    url = (f"https://ckpt-{rng.randint(1, 99)}.s3.us-east-1.amazonaws.com/runs/step_{rng.randint(1, 9999)}.tar"
           f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={_akid(rng)}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
           f"&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={signature}")
    return Planted("presigned_url", url, signature)


def _url_credentials(rng: random.Random) -> Planted:
    password = mixed(rng, rng.randint(12, 24))
    scheme = rng.choice(["postgresql", "redis", "https", "mongodb+srv"])
    return Planted("url_credentials", f"{scheme}://svc-{rng.randint(1, 99)}:{password}@db.internal:5432/runs", password)


def _aws_access_key_id(rng: random.Random) -> Planted:
    key = _akid(rng)
    return Planted("aws_access_key_id", key, key)


def _aws_secret(rng: random.Random) -> Planted:
    while True:
        value = chars(rng, 40, BASE64)
        if any(c.isupper() for c in value) and any(c.islower() for c in value):
            break
    name = rng.choice(["aws_secret_access_key = ", "AWS_SECRET_ACCESS_KEY=", '"SecretAccessKey": "'])
    return Planted("aws_secret_access_key", name + value + ('"' if name.endswith('"') else ""), value)


def _huggingface(rng: random.Random) -> Planted:
    token = rng.choice(["hf" + "_", "api_org" + "_"]) + mixed(rng, 34)
    return Planted("huggingface_token", token, token)


def _openai(rng: random.Random) -> Planted:
    token = "sk-" + "proj-" + chars(rng, 58, URLSAFE) + "T3Blbk" + "FJ" + chars(rng, 58, URLSAFE)
    return Planted("openai_api_key", token, token)


def _openai_compatible(rng: random.Random) -> Planted:
    """A bare `sk-` key as OpenAI-compatible providers and proxies issue them: no keyword before it."""
    shape = rng.random()
    if shape < 0.4:
        token = "sk-" + mixed(rng, 32, HEX)
    elif shape < 0.8:  # 48 characters is the legacy OpenAI shape, found as openai_api_key
        token = "sk-" + mixed(rng, rng.choice([n for n in range(32, 65) if n != 48]))
    else:
        token = "sk-" + "or-v1-" + mixed(rng, 64, HEX)
    before, after = rng.choice([("", ""), ("using ", " for the proxy"), ('{"model": "deepseek-chat", "k": "', '"}'),
                                ("curl -u ", ": http://gateway:4000/v1/models")])
    return Planted("openai_compatible_key", before + token + after, token)


def _anthropic(rng: random.Random) -> Planted:
    token = "sk-" + "ant-api03-" + chars(rng, 93, URLSAFE) + "AA"
    return Planted("anthropic_api_key", token, token)


def _github(rng: random.Random) -> Planted:
    if rng.random() < 0.5:
        token = "gh" + rng.choice("pousr") + "_" + mixed(rng, 36)
    else:
        token = "github" + "_pat_" + mixed(rng, 22) + "_" + mixed(rng, 59)
    return Planted("github_token", token, token)


def _google(rng: random.Random) -> Planted:
    token = "AI" + "za" + "Sy" + mixed(rng, 33, URLSAFE)
    return Planted("google_api_key", token, token)


def _slack(rng: random.Random) -> Planted:
    token = ("xo" + "xb-" + str(rng.randint(10**9, 10**10 - 1)) + "-" + str(rng.randint(10**11, 10**12 - 1))
             + "-" + mixed(rng, 24))
    return Planted("slack_token", token, token)


def _slack_webhook(rng: random.Random) -> Planted:
    path = "T" + mixed(rng, 10, UPPER_DIGITS) + "/B" + mixed(rng, 10, UPPER_DIGITS) + "/" + mixed(rng, 24)
    return Planted("slack_webhook", "https://hooks.slack.com/services/" + path, path)


def _wandb(rng: random.Random) -> Planted:
    if rng.random() < 0.5:
        key = "wandb" + "_v1_" + mixed(rng, 27) + "_" + mixed(rng, 49)
        return Planted("wandb_api_key", key, key)
    key = chars(rng, 40, HEX)
    return Planted("wandb_api_key", rng.choice(["WANDB_API_KEY=", "wandb login ", '"wandb_key": "']) + key, key)


def _netrc(rng: random.Random) -> Planted:
    password = mixed(rng, 20)
    return Planted("netrc_password", f"machine git.internal login ci-bot password {password}", password)


def _authorization(rng: random.Random) -> Planted:
    value = base64.b64encode(f"bot:{mixed(rng, 16)}".encode()).decode()
    return Planted("authorization_header", f"Authorization: Basic {value}", value)


def _bearer(rng: random.Random) -> Planted:
    token = mixed(rng, 40, URLSAFE)
    return Planted("bearer_token", f"Authorization: Bearer {token}", token)


def _generic(rng: random.Random) -> Planted:
    value = mixed(rng, rng.randint(12, 28))
    name = rng.choice(["password=", "db_password: ", "client_secret = ", "api_key=", "refresh_token: ", "--token="])
    return Planted("generic_secret", name + value, value)


GENERATORS: dict[str, Callable[[random.Random], Planted]] = {
    "pem_private_key": _pem,
    "iris_proxy_url": _iris,
    "presigned_url": _presigned,
    "aws_access_key_id": _aws_access_key_id,
    "aws_secret_access_key": _aws_secret,
    "huggingface_token": _huggingface,
    "anthropic_api_key": _anthropic,
    "openai_api_key": _openai,
    "openai_compatible_key": _openai_compatible,
    "github_token": _github,
    "google_api_key": _google,
    "slack_token": _slack,
    "slack_webhook": _slack_webhook,
    "wandb_api_key": _wandb,
    "jwt": _jwt,
    "url_credentials": _url_credentials,
    "netrc_password": _netrc,
    "authorization_header": _authorization,
    "bearer_token": _bearer,
    "generic_secret": _generic,
}
KINDS: tuple[str, ...] = tuple(GENERATORS)


def plant(kind: str, rng: random.Random) -> Planted:
    return GENERATORS[kind](rng)


def fake_secret(kind: str, rng: random.Random) -> str:
    """The text to plant for `kind` (the credential plus any context its detector needs)."""
    return plant(kind, rng).text


# Things ML logs are full of that must NOT be flagged.
def benign_lookalikes(rng: random.Random) -> list[str]:
    sha256 = chars(rng, 64, HEX)
    git_sha = chars(rng, 40, HEX)
    uuid = "-".join(chars(rng, n, HEX) for n in (8, 4, 4, 4, 12))
    return [
        f'"checkpoint_sha256": "{sha256}"',
        f"sha256:{sha256}",
        f'"git_sha": "{git_sha}", "commit": "{git_sha[:12]}"',
        f'"run_id": "{uuid}", "trial_id": "{uuid}"',
        "password=${DB_PASSWORD}",
        "token: <your-token-here>",
        "api_key=***",
        '"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"',
        '"max_tokens": 4096, "num_tokens": 123456, "tokens_per_second": 5321.7',
        '"tokenizer": "Qwen/Qwen3-8B", "tokenizer_revision": "' + git_sha + '"',
        f'"api_key_sha256": "{sha256}"',
        f"wandb: Syncing run {chars(rng, 8, string.ascii_lowercase + string.digits)} to https://wandb.ai/org/proj",
        "s3://rl-runs/skyrl/step_000100/model.safetensors",
        "https://huggingface.co/datasets/org/traces/resolve/main/data.parquet",
        "<redacted:huggingface_token>",
    ]
