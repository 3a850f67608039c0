"""A full run that publishes: the record fields and the Snakemake environment it needs.

Shared by tests/test_pipeline_full.py and the reliability suite so both publish the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkeep_dev.devserver.hub import HubServer
from rlkeep.registry import register_base_model
from tests.support.hub import hub_env

BASE_MODEL = "demo/tiny-qwen3-base"


def publish_overrides(bucket: str, data_root: Path, job: str = "rl-demo") -> dict[str, Any]:
    """Record fields for a run that publishes, registers and archives; the base model is
    registered once per data root (a second job in the same root reuses it)."""
    registry = f"sqlite:///{data_root / 'registry.db'}"
    if not (data_root / "registry.db").exists():
        register_base_model(registry, hub_id=BASE_MODEL, owner="demo")
    return {
        "base_model": BASE_MODEL,
        "publish": {"model": f"demo/{job}", "traces": f"demo/{job}-traces", "private": True},
        "register": {"authorized": True, "url": registry},
        "archive": {"dest": f"s3://{bucket}/archives"},
    }


def env_for(hub: HubServer) -> dict[str, str]:
    """The Hub part of a Snakemake subprocess environment (endpoint, token, Xet off)."""
    return {key: value for key, value in hub_env(hub.url, hub.token).items()
            if key.startswith("HF_") or key in {"RLKEEP_HUB_TOKEN"}}
