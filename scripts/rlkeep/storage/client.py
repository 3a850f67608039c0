"""The process's boto3 S3 client, configured from the standard AWS sources only
(docs/contract.md §2): AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3
or AWS_ENDPOINT_URL, AWS_REGION and AWS_CONFIG_FILE (e.g. `s3 = addressing_style = virtual` for
CoreWeave). Checksums are sent only when required, which Cloudflare R2 and other S3 clones need
(boto/boto3#4392). Throttled requests are retried by rlkeep.storage.failures.slowdown_retry.

boto3 and botocore are imported when the first client is built: they cost about 0.2 s to import,
and planning imports rlkeep.storage without ever talking to a store.
"""
from __future__ import annotations

import os
import threading
from datetime import datetime

from rlkeep.storage.failures import slowdown_retry

API_ATTEMPTS = 5  # botocore's own retries (standard mode: 5xx, resets), with backoff


_clients: dict[str | None, object] = {}
_credentials: dict[int, object] = {}  # id(client) -> the botocore credentials it signs with
clients_lock = threading.Lock()


def s3_client():  # type: ignore[no-untyped-def]
    """One boto3 client per endpoint for the whole process: clients are thread-safe, and each
    costs tens of MB and noticeable CPU to build (a client per thread multiplies both)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    client = _clients.get(endpoint)
    if client is not None:
        return client
    with clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"max_attempts": API_ATTEMPTS, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=64,
            )
            session = boto3.session.Session(botocore_session=_botocore_session())
            region = session.region_name or os.environ.get("AWS_REGION") or "us-east-1"
            client = session.client("s3", region_name=region, config=config)
            client.meta.events.register_first("needs-retry.s3", slowdown_retry)
            _credentials[id(client)] = session.get_credentials()
            _clients[endpoint] = client
    return client


def _timestamp(value: str):  # type: ignore[no-untyped-def]
    """ISO 8601 timestamps (every listing entry has one) without dateutil's tokenizer, which costs
    a quarter of a millisecond per object; any other form goes to botocore's own parser."""
    from botocore.utils import parse_timestamp

    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return parse_timestamp(value)
    return parsed if parsed.tzinfo is not None else parse_timestamp(value)


def _botocore_session():  # type: ignore[no-untyped-def]
    """botocore's session with the fast listing timestamp parser."""
    import botocore.session

    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
    return core


def credentials_of(client: object) -> object | None:
    """The botocore credentials the client signs with (None: anonymous)."""
    return _credentials.get(id(client))


def requester_identity(client: object, store_message: str) -> str:
    """Whose read was refused: the access key id it was signed with (never the secret) and the
    store's own words when they name a principal (AWS: `User: arn:... is not authorized`)."""
    credentials = credentials_of(client)
    access_key = credentials.get_frozen_credentials().access_key if credentials is not None else None  # type: ignore[attr-defined]
    parts = [f"signed with access key id {access_key}" if access_key else "an anonymous request"]
    if store_message and "Signature" not in store_message:
        parts.append(f"the store says: {store_message[:300]}")
    return "; ".join(parts)
