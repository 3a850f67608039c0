"""Which protocol step a Hub request belongs to, named for an operator: what a failure or a rate
limit says it stopped at."""
from __future__ import annotations


def hub_call_of(method: str, path: str) -> str:
    """The protocol step a request belongs to, named for an operator."""
    steps = [("/preupload/", "preupload"), ("/info/lfs/objects/batch", "LFS batch"), ("/verify", "LFS verify"),
             ("/complete", "LFS multipart completion"), ("/commit/", "commit"), ("/validate-yaml", "README validation"),
             ("/resolve/", "file download"), ("/tree/", "tree listing"), ("/paths-info/", "paths info"),
             ("/repos/create", "repo creation"), ("/xet-", "Xet token")]
    for marker, name in steps:
        if marker in path:
            return name
    if method == "PUT":
        return "LFS upload"
    if path.startswith("/api/"):
        return "repo info"
    return "request"
