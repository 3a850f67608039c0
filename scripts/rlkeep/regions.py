"""Where each end of a transfer is, how we know it, and the check that stops a large or
cross-region transfer before it starts (docs/contract.md §6: cross-region transfers).

A region is only ever taken from something that states it: a record field (`store_region`,
`archive.region`), the configuration for the machine running rlkeep (`policy.local_region`), or
the S3 store's answer to GetBucketLocation. Anything else is unknown, and says why; nothing is
inferred from a bucket, cluster or run name.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkeep.errors import RlkeepError
from rlkeep.storage import bucket_location

if TYPE_CHECKING:
    from rlkeep.context import StepContext

log = logging.getLogger("rlkeep")

HF_PREFIX = "hf://"
BucketLookup = Callable[[str], "tuple[str | None, str]"]


@dataclass(frozen=True)
class Region:
    name: str | None  # None: unknown
    source: str  # where the name comes from, or why it is unknown

    @property
    def known(self) -> bool:
        return self.name is not None

    def to_json(self) -> dict[str, Any]:
        return {"region": self.name, "source": self.source}

    def describe(self) -> str:
        return f"{self.name} ({self.source})" if self.known else f"unknown ({self.source})"


def declared_or_asked(url: str, declared: str | None, field: str, *, ask: BucketLookup = bucket_location) -> Region:
    """The region of the store or destination at `url`: the record's `field` when it declares one,
    else the bucket's location when `url` is s3:// and the store answers, else unknown."""
    if declared:
        return Region(declared, f"record field {field}")
    if url.startswith("s3://"):
        name, how = ask(url)
        return Region(name, how) if name else Region(None, f"the record declares no {field} and {how}")
    if url.startswith(HF_PREFIX):
        return Region(None, f"the record declares no {field} and the Hub reports no storage region")
    return Region(None, f"the record declares no {field} and {url.split(':', 1)[0]}:// has no region to ask")


def store_region(record: Any, *, ask: BucketLookup = bucket_location) -> Region:
    return declared_or_asked(record.store, record.store_region, "store_region", ask=ask)


def archive_dest_region(record: Any, *, ask: BucketLookup = bucket_location) -> Region:
    archive = record.archive or {}
    return declared_or_asked(str(archive.get("dest", "")), archive.get("region"), "archive.region", ask=ask)


def local_region(config: dict[str, Any]) -> Region:
    """The machine running rlkeep (the data root): only the configuration can say where it is."""
    declared = (config.get("policy") or {}).get("local_region")
    if declared:
        return Region(str(declared), "config policy.local_region")
    return Region(None, "config policy.local_region is not set")


def store_to_local(ctx: StepContext) -> dict[str, Region]:
    """check_transfer keywords for a read from the run's store into the data root. The store is
    asked for its location only when the local region is known (otherwise there is nothing to
    compare it with)."""
    local = local_region(ctx.config)
    if local.known or ctx.record.store_region:
        return {"source": store_region(ctx.record), "dest": local}
    return {"source": Region(None, "the record declares no store_region (not asked of the store: the local "
                                   "region is unknown too)"), "dest": local}


def store_to_archive(record: Any, *, ask: BucketLookup = bucket_location) -> dict[str, Region]:
    """check_transfer keywords for the archive copy: the archive is the run's data, so it leaves the
    store's region when archive.dest is elsewhere. The store is asked for its location only when
    the destination's region is known."""
    dest = archive_dest_region(record, ask=ask)
    if dest.known or record.store_region:
        return {"source": store_region(record, ask=ask), "dest": dest}
    return {"source": Region(None, "the record declares no store_region (not asked of the store: the "
                                   "destination's region is unknown too)"), "dest": dest}


def compare(source: Region, dest: Region) -> bool | None:
    """True: different known regions; False: the same; None: at least one is unknown."""
    if not (source.known and dest.known):
        return None
    assert source.name is not None and dest.name is not None
    return source.name.lower() != dest.name.lower()


def check_transfer(ctx: StepContext, *, nbytes: int, what: str, source: Region | None = None,
                   dest: Region | None = None) -> dict[str, Any]:
    """Stop a large or cross-region transfer before it starts, unless this invocation allows it.

    The allowance is `--config allow_transfer=<job>` for exactly this job (docs/contract.md §6).
    source/dest: where each end is and how that is known (rlkeep.regions); absent means not looked
    up for this transfer. A region that is unknown is said in the log, never assumed. Returns the
    evidence for the step's sentinel: the regions compared and their sources, and whether the
    allowance was used.
    """
    source = source or Region(None, "not looked up for this transfer")
    dest = dest or Region(None, "not looked up for this transfer")
    crossing = compare(source, dest)
    allowed = ctx.authorized("allow_transfer")
    evidence: dict[str, Any] = {
        "what": what, "bytes": nbytes, "source_region": source.to_json(), "dest_region": dest.to_json(),
        "regions_compared": crossing is not None, "cross_region": crossing,
        "allowed_by": f"--config allow_transfer={ctx.job}" if allowed else None,
    }
    if crossing is None:
        unknown = [f"{end} region unknown ({region.source})" for end, region in (("source", source), ("destination", dest))
                   if not region.known]
        log.info("%s: regions not compared: %s", what, "; ".join(unknown))
    else:
        log.info("%s: source region %s, destination region %s: %s", what, source.describe(), dest.describe(),
                 "crosses regions" if crossing else "same region")
    if allowed:
        return evidence
    limit = int(ctx.config.get("policy", {}).get("max_transfer_bytes", 0) or 0)
    if limit and nbytes > limit:
        raise RlkeepError(
            f"{what}: {nbytes:,} bytes is over policy.max_transfer_bytes = {limit:,}; nothing was transferred. "
            f"To allow it for this job only, rerun with --config allow_transfer={ctx.job}"
        )
    if crossing:
        raise RlkeepError(
            f"{what}: crosses regions ({source.name} -> {dest.name}): source region from {source.source}, "
            f"destination region from {dest.source}; nothing was transferred. To allow it for this job only, rerun with --config allow_transfer={ctx.job}"
        )
    return evidence
