"""A store the record names that cannot be reached, said in the record's words: the record file,
the field that names the store (`store`, `archive.dest`), what was seen, and the remedy for that
cause. The remedy ends the message after REMEDY_MARK, and STATUS.json's advice for the blocked
step is that remedy (rlkeep.stepstate.remedy_of), not the step's usual one.

rlkeep.storage classifies the error (rlkeep.storage.failures.WorldError); this module names the
record's field and, for credentials, what the standard AWS chain read.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlkeep.records import JobRecord
    from rlkeep.storage.failures import WorldError

REMEDY_MARK = " Remedy: "
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                        "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# botocore's Credentials.method: where the standard chain found the credentials it signed with
CHAIN_SOURCES = {"env": "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY", "shared-credentials-file":
                 "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials)",
                 "config-file": "the config file (AWS_CONFIG_FILE, else ~/.aws/config)"}


def store_field(record: JobRecord, url: str) -> str | None:
    """The record field that names the store at `url`, or None when no field does."""
    candidates = {"store": record.store}
    archive = getattr(record, "archive", None)
    if isinstance(archive, dict) and isinstance(archive.get("dest"), str):
        candidates["archive.dest"] = archive["dest"]
    for field, value in candidates.items():
        base = value.rstrip("/")
        if url.rstrip("/") == base or url.startswith(base + "/"):
            return field
    return None


def credential_chain() -> str:
    """What the standard chain read: each variable set or unset (never a secret's value), and the
    source of the credentials it found, if any."""
    from rlkeep.storage.client import credentials_of, s3_client

    states = [f"{name} {'set' if os.environ.get(name) else 'unset'}" for name in CREDENTIAL_VARIABLES]
    credentials = credentials_of(s3_client())
    method = getattr(credentials, "method", None)
    used = (f"signed with credentials from {CHAIN_SOURCES.get(str(method), method)}" if credentials is not None
            else "the chain found no credentials")
    return f"{used}; {', '.join(states)}"


def in_record_words(error: WorldError, record: JobRecord) -> str:
    """One line: the record file and field, what was seen, and the remedy for the cause."""
    field = store_field(record, error.url)
    named = f"{record.path}: field '{field}' is '{error.url}'" if field else f"{record.path}: store '{error.url}'"
    endpoint = next((os.environ[name] for name in ENDPOINT_VARIABLES if os.environ.get(name)), None)
    at = f" at {endpoint}" if endpoint else ""
    where = f"the record's {field}:" if field else "the record"
    if error.cause == "no_bucket":
        seen = f"its bucket does not exist{at} ({error})"
        remedy = f"correct {where} to the bucket and prefix the run wrote to, then rerun"
    elif error.cause in {"no_credentials", "credentials_refused"}:
        seen = f"{error}; {credential_chain()}"
        remedy = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to a key this store accepts, "
                  "then rerun")
    else:
        seen = f"{error}; endpoint {' / '.join(ENDPOINT_VARIABLES)} is {endpoint or 'unset (AWS default)'}"
        remedy = (f"make the endpoint answer, or correct {' or '.join(ENDPOINT_VARIABLES)} (or {where}) to the "
                  "store the run wrote to, then rerun")
    return f"{named}: {seen}.{REMEDY_MARK}{remedy}"


def remedy_of(reason: str) -> str | None:
    """The remedy a failure's message states (after REMEDY_MARK on its first line), or None."""
    first = (reason.splitlines() or [""])[0]
    return first.split(REMEDY_MARK, 1)[1].strip() if REMEDY_MARK in first else None
