"""Uploads to an s3:// store: a small file in one PUT; a file above MULTIPART_BYTES goes in parts of that size, and
the parts an interrupted upload of the same key left behind are aborted before and after (they
are invisible, but stored and billed). Never another key's uploads.

boto3's transfer manager is imported on the first upload (boto3 costs about 0.2 s to import).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rlkeep.errors import StoreError
from rlkeep.storage.client import s3_client
from rlkeep.storage.objects import ObjectInfo

if TYPE_CHECKING:  # rlkeep.storage.s3 imports this module
    from rlkeep.storage.s3 import S3Store

log = logging.getLogger(__name__)

MULTIPART_BYTES = 64 << 20  # uploads above this go in parts of this size


def put_file(store: S3Store, key: str, path: Path) -> ObjectInfo:
    """Upload one file (in parts above MULTIPART_BYTES), aborting this key's unfinished uploads
    before and after a multipart upload."""
    if path.stat().st_size < MULTIPART_BYTES:  # one request: a transfer manager per small file cost more
        with path.open("rb") as body:
            store.put_open_file(key, body)
        return ObjectInfo(key=key, size=path.stat().st_size)
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES,
                            max_concurrency=4)
    abort_unfinished_uploads(store, key)
    try:
        store.call(
            f"{store.url_of(key)}: upload",
            lambda: s3_client().upload_file(str(path), store.bucket, store.full_key(key), Config=config),
        )
    finally:
        abort_unfinished_uploads(store, key)
    # Not a HEAD: a store with read-after-write lag may not show the object yet (verification
    # re-checks, within its bound); the store took the upload, so this is what it holds.
    return ObjectInfo(key=key, size=path.stat().st_size)


def unfinished_uploads(store: S3Store, key: str) -> list[str]:
    """Upload ids of multipart uploads in progress for exactly this key (no other key's)."""
    full = store.full_key(key)
    ids: list[str] = []
    kwargs: dict[str, str] = {"Bucket": store.bucket, "Prefix": full}
    while True:
        page = store.call(f"{store.url_of(key)}: listing unfinished multipart uploads",
                          lambda: s3_client().list_multipart_uploads(**kwargs))
        uploads = page.get("Uploads", [])  # type: ignore[union-attr]
        ids += [upload["UploadId"] for upload in uploads if upload.get("Key") == full]
        if not page.get("IsTruncated"):  # type: ignore[union-attr]
            return ids
        kwargs["KeyMarker"] = page["NextKeyMarker"]  # type: ignore[index]
        kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]  # type: ignore[index]


def abort_unfinished_uploads(store: S3Store, key: str) -> int:
    """Abort this key's multipart uploads in progress (a killed upload's parts); best effort:
    a store that refuses to list them is logged, and the upload goes on."""
    try:
        ids = unfinished_uploads(store, key)
        for upload_id in ids:
            store.call(f"{store.url_of(key)}: aborting multipart upload {upload_id}",
                       lambda: s3_client().abort_multipart_upload(Bucket=store.bucket, Key=store.full_key(key),
                                                                  UploadId=upload_id))
    except StoreError as error:
        log.warning("%s", error)
        return 0
    if ids:
        log.info("%s/%s: aborted %d unfinished multipart upload(s) an interrupted upload left", store.url, key, len(ids))
    return len(ids)
