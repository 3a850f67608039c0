"""Object store access: `s3://bucket/prefix` over boto3 and `file:///path`, behind one interface.

Configuration comes from the standard boto3 sources only (docs/contract.md §2; see
rlkeep.storage.client). Keys handed to callers are relative to the store root URL. Every read
records size and sha256 while streaming; an ETag is never trusted as a content hash.

The modules, one job each:
- objects: ObjectInfo, FetchedObject, the Store interface, the read refusals, check_key;
- store: open_store (the store a URL names) and bucket_location;
- local: FileStore, the file:// store;
- s3: S3Store, the s3:// store; multipart: its large uploads;
- client: the boto3 client from the standard AWS configuration;
- signer and connection: presigned GETs and small PUTs (botocore's signatures, proven) on keep-alive
  connections;
- failures: SlowDown and other throttling, clock skew, and the classification of errors;
- bulk: fetch_in_order (many objects, concurrently, in order, bounded memory) and upload_tree.
"""
from __future__ import annotations

from rlkeep.storage.bulk import fetch_in_order, upload_tree
from rlkeep.storage.client import s3_client
from rlkeep.storage.failures import (StoreThrottled, clock_problem, is_throttle, retry_after_seconds, slowdown_bound,
                                     throttle_pause)
from rlkeep.storage.local import FileStore
from rlkeep.storage.objects import (CHUNK, FetchedObject, ObjectChanged, ObjectDenied, ObjectInfo, ObjectMissing, Store,
                                    check_key)
from rlkeep.storage.s3 import S3Store
from rlkeep.storage.store import bucket_location, open_store

__all__ = [
    "CHUNK", "FetchedObject", "FileStore", "ObjectChanged", "ObjectDenied", "ObjectInfo", "ObjectMissing", "S3Store",
    "Store", "StoreThrottled", "bucket_location", "check_key", "clock_problem", "fetch_in_order", "is_throttle",
    "open_store", "retry_after_seconds", "s3_client", "slowdown_bound", "throttle_pause", "upload_tree",
]
