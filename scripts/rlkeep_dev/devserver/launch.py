"""Run the Hub-compatible dev server for tests and `make demo`: in-process, as its own process,
and the environment a huggingface_hub client (or a Snakemake child) needs to reach it.

In-process: `running_hub(root)`, a started HubServer. Out-of-process (what the Snakemake rules
see): `start_hub_process(root)` runs `python -m rlkeep_dev.devserver.hub`; `hub_env(url, token)`
gives the child environment (nothing about the transfer: the client asks the server, which speaks
Xet in Xet mode and answers it has none in LFS mode).
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkeep_dev.devserver.hub import HubServer

__all__ = ["HubProcess", "hub_env", "new_token", "running_hub", "start_hub_process"]


def new_token() -> str:
    """A fresh random token per server: no fixed secret lives in the test sources."""
    return "rlkeep-test-" + secrets.token_hex(16)


@contextmanager
def running_hub(root: Path, *, token: str | None = None, **options: Any) -> Iterator[HubServer]:
    server = HubServer(root, token=token, **options).start()
    try:
        yield server
    finally:
        server.stop()


def hub_env(url: str, token: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that talks to the server through huggingface_hub."""
    env = dict(os.environ if base is None else base)
    env.update({"HF_ENDPOINT": url, "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    env.pop("HF_HUB_OFFLINE", None)  # offline mode blocks localhost too
    if token is None:
        env.pop("HF_TOKEN", None)
    else:
        env["HF_TOKEN"] = token
    return env


@dataclass
class HubProcess:
    url: str
    pid: int
    root: Path
    token: str | None = field(repr=False)
    process: subprocess.Popen[bytes] = field(repr=False)

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then wait; returns the exit status (0 on a clean stop)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_hub_process(root: Path, *, token: str | None = None, xet: bool = False,
                      ready_timeout: float = 30) -> HubProcess:
    """Run the server as its own process (port 0), in Xet mode or LFS mode, and wait for its ready file."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ready = root.parent / f"{root.name}.ready.json"
    ready.unlink(missing_ok=True)
    env = dict(os.environ)
    if token is not None:
        env["RLKEEP_HUB_TOKEN"] = token  # not on the command line, where `ps` would show it
    process = subprocess.Popen(
        [sys.executable, "-m", "rlkeep_dev.devserver.hub", "--root", str(root), "--port", "0",
         "--ready-file", str(ready), *(["--xet"] if xet else [])],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + ready_timeout
    while not ready.is_file():
        if process.poll() is not None:
            raise RuntimeError(f"hub server exited with {process.returncode}: {process.stderr.read().decode()}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"hub server did not write {ready} within {ready_timeout}s")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    return HubProcess(url=info["url"], pid=info["pid"], root=root, token=token, process=process)
