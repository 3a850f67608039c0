"""Where to publish: the Hub's endpoint and token (from HF_ENDPOINT and HF_TOKEN unless passed),
the HfApi for it with rate limits handled, the URL it serves a repo at, and the token scrubbed from
any text that could carry it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from huggingface_hub import HfApi

from rlkeep.hub.ratelimits import install_rate_limit_handling

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class HubTarget:
    endpoint: str
    token: str | None = field(default=None, repr=False)

    def api(self) -> HfApi:
        """An HfApi for this Hub. It transfers the way huggingface_hub does by default (Xet where
        the Hub offers it); rlkeep.hub.transfer decides an upload's transfer before its commit."""
        install_rate_limit_handling()
        # token=False: never fall back to a token file saved for another Hub.
        return HfApi(endpoint=self.endpoint, token=self.token if self.token else False)

    def repo_url(self, repo_id: str, repo_type: str = "model") -> str:
        """Where this Hub serves the repo (the one place such a URL is joined): datasets under /datasets/."""
        return f"{self.endpoint}/{repo_id}" if repo_type == "model" else f"{self.endpoint}/{repo_type}s/{repo_id}"

    def scrub(self, text: str) -> str:
        """Defence in depth: no message built here should contain the token, but make sure."""
        if self.token and len(self.token) >= 8:  # shorter strings are not secrets, just noise to mask
            return text.replace(self.token, "<HF_TOKEN>")
        return text


def resolve_target(endpoint: str | None = None, token: str | None = None) -> HubTarget:
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    token = token if token is not None else os.environ.get("HF_TOKEN") or None
    return HubTarget(endpoint.rstrip("/"), token)
