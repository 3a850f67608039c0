"""The one way rlkeep joins a URL (a store root, an archive destination) with a key or a path under it."""
from __future__ import annotations


def join_url(base: str, *parts: str) -> str:
    """`base` and each non-empty part, one slash between them: join_url("s3://b/run/", "logs/a.out")
    is "s3://b/run/logs/a.out"; a part's own leading or trailing slashes never double one."""
    url = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            url = f"{url}/{part}"
    return url
