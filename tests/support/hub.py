"""Start and stop the Hub-compatible dev server (rlkeep_dev.devserver.hub) for tests.

In-process: the `hub_server` fixture (or `running_hub(root)`), a started HubServer with a fresh
random token, in LFS mode (a Hub that answers it has no Xet) unless a test asks for Xet mode with
`both_transfers` (parametrized: once in Xet mode, as the Hub is today, once in LFS mode).
Out-of-process (what the Snakemake rules see): `start_hub_process(root)` runs
`python -m rlkeep_dev.devserver.hub` and `hub_env(url, token)` gives the child environment.

Clients run huggingface_hub as a user does: Xet on, nothing set; rlkeep.hub uploads by LFS where the
server answers it has no Xet.
"""
from __future__ import annotations

import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlkeep_dev.devserver.hub import HubServer, stored_blobs
from rlkeep_dev.devserver.launch import HubProcess, hub_env, new_token, running_hub, start_hub_process

__all__ = ["TRANSFERS", "HubProcess", "both_transfers", "hub_env", "hub_server", "new_token", "no_client_backoff",
           "running_hub", "start_hub_process", "stored_blobs"]


TRANSFERS = ("xet", "lfs")
both_transfers = pytest.mark.parametrize("hub_server", TRANSFERS, indirect=True)  # a test in each server mode


@pytest.fixture
def hub_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HubServer]:
    """A started in-process server with state under tmp_path/hub and a random token (`.token`), in
    LFS mode, or in the mode `both_transfers` gives (`request.param`)."""
    mode = getattr(request, "param", "lfs")
    with running_hub(tmp_path / "hub", token=new_token(), xet=mode == "xet") as server:
        yield server


class _TimeWithoutSleep(types.ModuleType):
    """The `time` module as seen by huggingface_hub's retry loop, minus the waiting."""

    def __init__(self) -> None:
        super().__init__("time")

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


@pytest.fixture
def no_client_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub retries 5xx answers up to 5 times, sleeping 1+2+4+8+8 s; keep the retries
    (they still reach the server) but skip the sleeps so fault tests stay fast."""
    import huggingface_hub.utils._http as hf_http

    monkeypatch.setattr(hf_http, "time", _TimeWithoutSleep())
