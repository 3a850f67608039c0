"""The table of detectors: `RULES`, one row per credential shape, with the samples the tests run."""
from __future__ import annotations


import json
import re
from dataclasses import dataclass
from typing import Callable


from rlkeep.redaction import filters, samples
from rlkeep.redaction.common import ENVIRONMENT_KIND


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
    # The credential names itself (a prefix no prose uses, then the token): it is also looked for
    # with the line breaks a writer put into it taken out (joins.py). A keyword-led value is not:
    # where it ends at a line break cannot be told from the words of the next line.
    joinable: bool = False
    closed: bool = False  # the match ends with a marker of its own (a PEM footer): taken whole across breaks

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
        # `PRIVATE ?KEY`: a header wrapped at its space loses the space in the joined view
        body=(r"[ A-Z0-9_-]{0,100}PRIVATE ?KEY(?: BLOCK)?-----"
              r"(?:[\s\S]{0,16384}?-----END[ A-Z0-9_-]{0,100}PRIVATE ?KEY(?: BLOCK)?-----"
              r"|(?:[A-Za-z0-9+/=\s]|\\[nr]){0,16384})"),
        group=0,
        positive=json.dumps({"tls_key": samples.PEM}),
        secret=samples.PEM_LINES[2],
        negative=samples.CERT,
        hint=r"[ A-Z0-9_-]*PRIVATE ?KEY",
        closed=True,
        joinable=True,
    ),
    Rule(
        kind="iris_proxy_url",
        prefixes=("iris.oa.dev/proxy/t/",),
        body=r"""([^\s'"/\\<>?#&]{1,4096})""",
        group=1,
        positive=f"agent_url=https://iris.oa.dev/proxy/t/{samples.IRIS}/v1/chat/completions",
        secret=samples.IRIS,
        negative="see https://iris.oa.dev/proxy/status for the proxy health",
        accept=filters.accept_opaque,
        joinable=True,
    ),
    Rule(
        kind="presigned_url",
        prefixes=("x-amz-signature=", "x-amz-credential=", "x-amz-security-token=", "awsaccesskeyid=",
                  "x-goog-signature=", "x-goog-credential=", "googleaccessid="),
        body=r"""([^&\s"'<>\\#]{8,8192})""",
        group=1,
        positive=("https://ckpt.s3.us-east-1.amazonaws.com/step_100.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                  f"&X-Amz-Credential={samples.AKID}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
                  "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
                  f"&X-Amz-Signature={samples.SIGNATURE}"),
        secret=samples.SIGNATURE,
        negative="https://ckpt.s3.amazonaws.com/step_100.tar?X-Amz-Expires=3600&versionId=v2",
        lowercase=True,
        accept=filters.accept_letter_and_digit,
    ),
    Rule(
        kind="presigned_url",
        prefixes=("signature=", "sig="),
        body=r"""([^&\s"'<>\\#]{8,8192})""",
        group=1,
        positive=f"https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA1234&Expires=1700000000&Signature={samples.BEARER}",
        secret=samples.BEARER,
        negative=f"verify(payload, signature={samples.BEARER})",
        lowercase=True,
        left="query",
        accept=filters.accept_letter_and_digit,
    ),
    Rule(
        kind="aws_access_key_id",
        prefixes=("AKIA", "ASIA", "ABIA", "ACCA"),
        body=r"[A-Z0-9]{16}(?![A-Za-z0-9])",
        group=0,
        positive=f"aws_access_key_id = {samples.AKID}",
        secret=samples.AKID,
        negative="aws_access_key_id = " + "AKIA" + "IOSFODNN7" + "EXAMPLE",
        left="word",
        accept=filters.accept_not_example,
        hint=r"[A-Z0-9]{16}",
        joinable=True,
    ),
    Rule(
        kind="aws_secret_access_key",
        prefixes=("aws",),
        body=r"""[\s\S]{0,20}?(?:secret|key|pwd|pass|token)[\s\S]{0,20}?[=:"'\s>]([a-z0-9/+]{40})(?![a-z0-9/+=])""",
        group=1,
        positive=f'AWS_SECRET_ACCESS_KEY="{samples.AWS_SECRET}"',
        secret=samples.AWS_SECRET,
        negative=f"aws_key_commit: {samples.WANDB_HEX}",
        lowercase=True,
        accept=filters.accept_aws_secret,
        hint=r"[\s\S]{0,20}(?:secret|key|pwd|pass|token)",
    ),
    Rule(
        kind="aws_secret_access_key",
        prefixes=("secret_access_key", "secretaccesskey", "secret-access-key"),
        body=r"""[\s\S]{0,20}?[=:"'\s>]([a-z0-9/+]{40})(?![a-z0-9/+=])""",
        group=1,
        positive=f'{{"AccessKeyId": "{samples.AKID}", "SecretAccessKey": "{samples.AWS_SECRET}"}}',
        secret=samples.AWS_SECRET,
        negative='"SecretAccessKey": "${AWS_SECRET_ACCESS_KEY}"',
        lowercase=True,
        accept=filters.accept_aws_secret,
    ),
    Rule(
        kind="huggingface_token",
        prefixes=("hf_", "api_org_"),
        body=r"[A-Za-z0-9]{34,40}(?![A-Za-z0-9_])",
        group=0,
        positive=f"HF_TOKEN={samples.HF}",
        secret=samples.HF,
        negative="from huggingface_hub import hf_hub_download; hf_" + "abc",
        left="word",
        hint=r"[A-Za-z0-9]{34}",
        joinable=True,
    ),
    Rule(
        kind="anthropic_api_key",
        prefixes=("sk-ant-",),
        body=r"[a-z0-9]{2,10}-[A-Za-z0-9_-]{20,400}(?![A-Za-z0-9_-])",
        group=0,
        positive=f'client = Anthropic(api_key="{samples.ANTHROPIC}")',
        secret=samples.ANTHROPIC,
        negative="the sk-" + "ant-api03- prefix marks an Anthropic key",
        left="word",
        hint=r"[a-z0-9]{2,10}-[A-Za-z0-9_-]{20}",
        joinable=True,
    ),
    Rule(
        kind="openai_api_key",
        prefixes=("sk-",),
        body=(r"(?:(?:proj|svcacct|admin|service)-[A-Za-z0-9_-]{20,400}"
              r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{48})(?![A-Za-z0-9_-])"),
        group=0,
        positive=f"OPENAI_API_KEY={samples.OPENAI}",
        secret=samples.OPENAI,
        negative="pip install scikit-learn; risk-free; task-sk-" + "proj",
        left="word",
        hint=r"(?:(?:proj|svcacct|admin|service)-|[A-Za-z0-9]{20})",
        joinable=True,
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
        positive=f"proxy ready, use {samples.SK_BARE} with base_url=http://gateway:4000/v1",
        secret=samples.SK_BARE,
        negative=("sk-" + "abcdefghijklmnopqrstuvwxyzABCDEFGH and sk-" + samples.filler("sk-short", 31)
                  + " and risk-" + samples.filler("risk", 40)),
        left="word",
        accept=filters.accept_sk_key,
        hint=r"(?:[a-z0-9]{1,8}-){0,2}[A-Za-z0-9]{32}",
        joinable=True,
    ),
    Rule(
        kind="github_token",
        prefixes=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        body=r"[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])",
        group=0,
        positive=f"git clone https://{samples.GITHUB}@github.com/org/repo.git",
        secret=samples.GITHUB,
        negative="sigh" + "s_and_" + "ghp" + "_short_" + samples.filler("gh-neg", 12),
        left="word",
        hint=r"[A-Za-z0-9]{36}",
        joinable=True,
    ),
    Rule(
        kind="github_token",
        prefixes=("github_pat_",),
        body=r"[A-Za-z0-9_]{50,255}(?![A-Za-z0-9_])",
        group=0,
        positive=f"GITHUB_TOKEN: {samples.GITHUB_PAT}",
        secret=samples.GITHUB_PAT,
        negative="fine-grained tokens start with github" + "_pat_ and are 93 characters",
        left="word",
        hint=r"[A-Za-z0-9_]{50}",
        joinable=True,
    ),
    Rule(
        kind="google_api_key",
        prefixes=("AIza",),
        body=r"[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        group=0,
        positive=f"https://generativelanguage.googleapis.com/v1/models?key={samples.GOOGLE}",
        secret=samples.GOOGLE,
        negative="AI" + "za" + samples.filler("google-neg", 20),
        left="word",
        hint=r"[0-9A-Za-z_-]{35}",
        joinable=True,
    ),
    Rule(
        kind="slack_token",
        prefixes=("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xoxe-", "xapp-"),
        body=r"[0-9A-Za-z-]{10,250}(?![0-9A-Za-z-])",
        group=0,
        positive=f"SLACK_BOT={samples.SLACK}",
        secret=samples.SLACK,
        negative="xo" + "xb-placeholder-value-here",
        left="word",
        accept=filters.accept_with_digit,
        hint=r"[0-9A-Za-z-]{10}",
        joinable=True,
    ),
    Rule(
        kind="slack_webhook",
        prefixes=("hooks.slack.com/",),
        body=r"(?:services|workflows|triggers)/([A-Za-z0-9+/_-]{20,250})",
        group=1,
        positive=f"notify: https://hooks.slack.com/services/{samples.SLACK_HOOK}",
        secret=samples.SLACK_HOOK,
        negative="docs at https://hooks.slack.com/ and https://api.slack.com/messaging/webhooks",
        hint=r"(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20}",
        joinable=True,
    ),
    Rule(
        kind="wandb_api_key",
        prefixes=("wandb_v1_",),
        body=r"[A-Za-z0-9_]{40,200}(?![A-Za-z0-9_])",
        group=0,
        positive=f"WANDB_API_KEY={samples.WANDB_V1}",
        secret=samples.WANDB_V1,
        negative="keys since 0.22.3 start with wandb" + "_v1_ and are 86 characters",
        left="word",
        hint=r"[A-Za-z0-9_]{40}",
        joinable=True,
    ),
    Rule(
        kind="jwt",
        prefixes=("eyJ",),
        body=r"[A-Za-z0-9_-]{8,8192}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{0,8192}(?![A-Za-z0-9_-])",
        group=0,
        positive=f'{{"capability": "{samples.JWT}"}}',
        secret=samples.JWT.rsplit(".", 1)[1],
        negative=samples.b64url_json({"alg": "HS256", "typ": "JWT"}) + " is only a JWT header",
        left="word",
        hint=r"[A-Za-z0-9_-]*\.eyJ",
        joinable=True,
    ),
    Rule(
        kind="url_credentials",
        prefixes=("://",),
        body=r"""([^\s:/?#@'"\\<>]{0,256}):([^\s@/'"\\<>]{1,256})@""",
        group=2,
        positive=f"DATABASE_URL=postgresql://trainer:{samples.PASSWORD}@db.internal:5432/runs",
        secret=samples.PASSWORD,
        negative="https://example.com:8443/path@v2 and postgresql://trainer:${DB_PASSWORD}@db/runs",
        accept=filters.accept_opaque,
        hint=r"""[^\s/?#@]*:[^\s/@]+@""",
    ),
    Rule(
        kind="netrc_password",
        prefixes=("machine",),
        body=(r"""(?:[ \t]|\\t)+[^\s"'\\]{1,256}(?:\s|\\[nrt])+login(?:\s|\\[nrt])+[^\s"'\\]{1,256}"""
              r"""(?:\s|\\[nrt])+password(?:\s|\\[nrt])+([^\s"'\\<>]{1,1024})"""),
        group=1,
        positive=f"machine github.com\n  login ci-bot\n  password {samples.PASSWORD}\n",
        secret=samples.PASSWORD,
        negative="machine api.wandb.ai login user password ${WANDB_API_KEY}",
        lowercase=True,
        accept=filters.accept_opaque,
        hint=r"""(?:[ \t]|\\t)+[^\s"'\\]+(?:[\t\n\v\f\r ]|\\[nrt])+login(?:[\t\n\v\f\r ]|\\[nrt])""",
    ),
    Rule(
        kind="wandb_api_key",
        prefixes=("wandb",),
        body=r"[\s\S]{0,40}?(?<![0-9a-z])([0-9a-f]{40})(?![0-9a-z])",
        group=1,
        positive=f"export WANDB_API_KEY={samples.WANDB_HEX}",
        secret=samples.WANDB_HEX,
        negative="wandb: logged artifact sha256:" + samples.filler("sha", 64, samples.HEXDIGITS),
        lowercase=True,
        hint=r"[\s\S]{0,40}[0-9a-f]{40}",
    ),
    Rule(
        kind="authorization_header",
        prefixes=("authorization",),
        body=_SEPARATOR + r"""(?:basic|token|digest)\s+([^\s"',;<>\\]{8,4096})""",
        group=1,
        positive=f'{{"Authorization": "Basic {samples.BASIC}"}}',
        secret=samples.BASIC,
        negative='{"Authorization": "Basic <credentials>"}',
        lowercase=True,
        accept=filters.accept_two_classes,
        hint=r"""(?:\\?["'])?[ \t]{0,3}(?::=|=>|[:=])""",
    ),
    Rule(
        kind="bearer_token",
        prefixes=("bearer",),
        body=r"\s+([a-z0-9._~+/-]{20,4096}=*)",
        group=1,
        positive=f"curl -H 'Authorization: Bearer {samples.BEARER}' https://api.example.com",
        secret=samples.BEARER,
        negative="the cupbearer said: bearer tokens expire after 3600 seconds",
        lowercase=True,
        left="word",
        accept=filters.accept_letter_and_digit,
        hint=r"[\t\n\v\f\r ]+[a-z0-9._~+/-]{20}",
    ),
    Rule(
        kind="generic_secret",
        prefixes=_GENERIC_KEYWORDS,
        body=_SEPARATOR + _GENERIC_VALUE,
        group=1,
        positive=f'db_password = "{samples.PASSWORD}"',
        secret=samples.PASSWORD,
        negative=("password=${DB_PASSWORD} token: <your-token> api_key=*** secret: " + "<redacted:generic_secret>"
                  ' "eos_token": "<|im_end|>", "max_tokens": 4096, "tokenizer": "Qwen/Qwen3-8B",'
                  ' "api_key_sha256": "' + samples.filler("ak", 64, samples.HEXDIGITS) + '"'),
        lowercase=True,
        accept=filters.accept_generic,
        hint=_SEPARATOR + r"""[^\s"'`,;(){}\[\]<>\\$][^\s"'`,;(){}\[\]<>\\]{7}""",
    ),
    Rule(
        kind="generic_secret",
        prefixes=("-e ", "--env "),
        body=(r"""[ \t]*[a-z0-9_]{0,64}(?:token|secret|password|passwd|api_key|apikey|access_key|secret_key|credentials?)"""
              r"""[ \t]+["']?([^\s"'<>\\]{8,1024})"""),
        group=1,
        positive=f"iris job run -e DB_PASSWORD {samples.PASSWORD} -- python train.py",
        secret=samples.PASSWORD,
        negative="iris job run -e HF_TOKEN ${HF_TOKEN} -e WANDB_MODE online",
        lowercase=True,
        accept=filters.accept_generic,
        hint=r"[ \t]*[a-z0-9_]*(?:token|secret|passw|api_?key|access_key|secret_key|credential)",
    ),
)

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in RULES)) + (ENVIRONMENT_KIND,)
MAX_PREFIX_LENGTH = max(len(prefix) for rule in RULES for prefix in rule.prefixes)

# Specific kinds win when spans overlap; an exact environment value beats only the generic rules.
LITERAL_PRIORITY = next(i for i, rule in enumerate(RULES) if rule.kind == "generic_secret") - 0.5
