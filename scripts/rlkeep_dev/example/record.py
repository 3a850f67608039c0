"""The example run's job record (contract §3) as a dict."""
from __future__ import annotations

from typing import Any

from rlkeep.errors import RecordError

DEFAULT_RULE: dict[str, Any] = {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 0.3333}


def build_record(
    *,
    job: str,
    user: str,
    chain: list[str],
    interval: int,
    tracker_url: str | None,
    store_url: str,
    scheduler: str,
    cluster: str | None,
    rule: dict | None,
    publish: dict | None,
    register: dict | None,
    archive: dict | None,
    base_model: str | None,
) -> dict[str, Any]:
    if scheduler not in ("iris", "none"):
        raise RecordError(f"example record: scheduler {scheduler!r} must be 'iris' or 'none'")
    if scheduler == "iris" and not cluster:
        raise RecordError("example record: cluster is required when scheduler is 'iris'")
    if not store_url:
        raise RecordError("example record: store_url is required")
    record: dict[str, Any] = {"job": job, "user": user, "scheduler": scheduler}
    if cluster:
        record["cluster"] = cluster
    record["chain"] = list(chain)
    record["store"] = store_url.rstrip("/")
    if tracker_url:
        record["tracker_url"] = tracker_url
    if base_model:
        record["base_model"] = base_model
    checkpoint: dict[str, Any] = {"interval": interval}
    if rule is not None:
        checkpoint["rule"] = dict(rule)
    record["checkpoint"] = checkpoint
    for key, value in (("publish", publish), ("register", register), ("archive", archive)):
        if value is not None:
            record[key] = dict(value)
    return record
