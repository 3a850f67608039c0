"""open_store: the store a URL names (`s3://bucket/prefix` or `file:///path`), and where an
s3:// URL's bucket says it lives (bucket_location)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from rlkeep.errors import StoreError
from rlkeep.storage.client import s3_client
from rlkeep.storage.failures import describe_error
from rlkeep.storage.local import FileStore
from rlkeep.storage.objects import Store
from rlkeep.storage.s3 import S3Store


def open_store(url: str) -> Store:
    """The store behind url; StoreError naming the URL when it is neither form."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreError(f"{url}: expected s3://bucket/prefix")
        return S3Store(url, parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in {"", "localhost"} or not parsed.path.startswith("/"):
            raise StoreError(f"{url}: expected file:///absolute/path")
        return FileStore(url, Path(parsed.path))
    raise StoreError(f"{url}: unsupported store URL; expected s3://bucket/prefix or file:///absolute/path")


def bucket_location(url: str) -> tuple[str | None, str]:
    """(region, how it was found) of an s3:// URL's bucket, asked of the store (GetBucketLocation).

    An empty answer is not read as us-east-1 (AWS's convention) because other S3 servers, e.g.
    SeaweedFS, answer empty too: the region is then unknown, and the text says why.
    """
    store = open_store(url)
    if not isinstance(store, S3Store):
        return None, f"{url}: not an s3:// store, it has no bucket location"
    try:
        response = s3_client().get_bucket_location(Bucket=store.bucket)
    except Exception as error:  # noqa: BLE001 - any refusal leaves the region unknown, with the reason
        return None, f"GetBucketLocation of bucket {store.bucket} failed: {describe_error(error)}"
    region = response.get("LocationConstraint")
    if not isinstance(region, str) or not region.strip():
        return None, f"GetBucketLocation of bucket {store.bucket} answered empty"
    return region.strip(), f"GetBucketLocation of bucket {store.bucket}"
