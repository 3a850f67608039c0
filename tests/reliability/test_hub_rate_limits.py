"""The Hub rate-limiting us: HTTP 429 with Retry-After on preupload, commit and download, answered by
the real Hub-compatible server (its own request hook) to the real huggingface_hub client.

A burst is waited out as the Hub asks, and publication and its fresh download complete; a limit that
outlasts the bound (RLKEEP_HUB_RATE_LIMIT_WAIT) stops with a message naming the repo, the protocol
step and the bound, and nothing is half-published.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlkeep_dev.devserver.hub import HubError
from rlkeep.errors import RlkeepError
from rlkeep.hub import download_fresh, publish_model
from tests.reliability import figures_log
from tests.reliability.support import hub_head, hub_intercept
from tests.support.hub import hub_server  # noqa: F401 - fixture

LIMITED_KINDS = ("preupload", "commit", "download")


@dataclass
class RateLimit:
    """Answer the next `remaining[kind]` requests of each kind with 429 + Retry-After, noting when."""

    retry_after: str
    remaining: dict[str, int]
    answered: Counter = field(default_factory=Counter)
    seen: list[tuple[float, str, str, bool]] = field(default_factory=list)  # (time, kind, path, limited)

    def __call__(self, kind: str, path: str) -> None:
        limited = self.remaining.get(kind, 0) > 0
        self.seen.append((time.monotonic(), kind, path, limited))
        if limited:
            self.remaining[kind] -= 1
            self.answered[kind] += 1
            raise HubError(429, "rate limited: slow down", headers={"Retry-After": self.retry_after})

    def gaps(self) -> list[float]:
        """For each 429, the time until the same request (kind, path) came again."""
        out = []
        for index, (when, kind, path, limited) in enumerate(self.seen):
            if limited:
                later = next((t for t, k, p, _ in self.seen[index + 1:] if (k, p) == (kind, path)), None)
                if later is not None:
                    out.append(later - when)
        return out


def stage(root: Path) -> Path:
    files = {"model.safetensors": b"\x08\0\0\0\0\0\0\0{}      " + os.urandom(4096),
             "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}', "README.md": b"# rl-model\n"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def test_429_bursts_on_preupload_commit_and_download_are_waited_out(tmp_path: Path, hub_server,
                                                                   monkeypatch) -> None:
    """Guard: rlkeep.hub.RateLimitTransport (installed by HubTarget.api). Without it the commit's 429
    fails publication at once (huggingface_hub does not retry a commit)."""
    monkeypatch.setenv("RLKEEP_HUB_RATE_LIMIT_WAIT", "60")
    staged = stage(tmp_path / "stage")
    limit = RateLimit("1", {kind: 3 for kind in LIMITED_KINDS})
    with hub_intercept(hub_server, limit):
        result = publish_model(staged, "demo/rl-model", private=True, endpoint=hub_server.url, token=hub_server.token,
                               commit_message="Publish rl-model")
        fresh = download_fresh("demo/rl-model", tmp_path / "fresh", repo_type="model", revision=result["commit"],
                               endpoint=hub_server.url, token=hub_server.token)
    assert limit.answered == {kind: 3 for kind in LIMITED_KINDS}
    gaps = limit.gaps()
    assert len(gaps) == 9 and min(gaps) >= 0.95, gaps  # each Retry-After honoured, each request sent again
    head, files = hub_head(hub_server, "demo/rl-model")
    assert head == result["commit"] and set(files) == {".gitattributes", *digests(staged)}
    assert {k: v for k, v in digests(fresh).items() if k != ".gitattributes"} == digests(staged)
    figures_log.record("hub_faults", injected={f"429 {kind}": 3 for kind in LIMITED_KINDS}, lost=0)


@pytest.mark.parametrize(("kind", "step"), [("preupload", "preupload"), ("commit", "commit"),
                                            ("download", "file download")])
def test_a_rate_limit_past_the_bound_stops_clearly_and_publishes_nothing(tmp_path: Path, hub_server, monkeypatch,
                                                                         kind: str, step: str) -> None:
    """Guard: the bound in RateLimitTransport (RLKEEP_HUB_RATE_LIMIT_WAIT). Without it a Hub that keeps
    answering 429 is waited on for as long as it does (huggingface_hub sleeps whatever Retry-After says)."""
    monkeypatch.setenv("RLKEEP_HUB_RATE_LIMIT_WAIT", "3")
    staged = stage(tmp_path / "stage")
    repo = f"demo/limited-{kind}"
    commit = None
    if kind == "download":
        commit = publish_model(staged, repo, private=True, endpoint=hub_server.url, token=hub_server.token,
                               commit_message="Publish")["commit"]
    limit = RateLimit("2", {kind: 10**6})
    started = time.monotonic()
    with hub_intercept(hub_server, limit), pytest.raises(RlkeepError) as raised:
        if kind == "download":
            download_fresh(repo, tmp_path / "fresh", repo_type="model", revision=commit, endpoint=hub_server.url,
                           token=hub_server.token)
        else:
            publish_model(staged, repo, private=True, endpoint=hub_server.url, token=hub_server.token,
                          commit_message="Publish")
    took = time.monotonic() - started
    message = str(raised.value)
    assert f"model repo {repo} at {hub_server.url}" in message, message
    assert f"HTTP 429" in message and f"({step})" in message, message
    assert "asks to wait 2 s more" in message and "past the 3 s allowed (RLKEEP_HUB_RATE_LIMIT_WAIT)" in message, message
    assert took < 15, took  # one wait of 2 s, then the bound
    assert hub_server.token not in message
    if kind == "download":
        assert not (tmp_path / "fresh").exists()  # nothing half-downloaded stays
    else:
        _, files = hub_head(hub_server, repo)
        assert set(files) <= {".gitattributes"}  # nothing half-published
    figures_log.record("hub_faults", injected={f"429 {kind}": limit.answered[kind]}, lost=0)
