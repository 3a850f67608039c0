"""The sync steps: sync_traces_step (the trace tree) and sync_logs_step (every attempt's trainer
log and the store's durable non-weight objects), each a tar and its manifest; and LongLived, which
keeps a sync's listing out of the garbage collector's rescans while the step holds it."""
from __future__ import annotations

import gc
import hashlib
import logging
from collections.abc import Iterator
from itertools import chain
from types import TracebackType

from rlkeep.context import StepContext
from rlkeep.diskspace import TAR_OVERHEAD_PER_MEMBER, require_free
from rlkeep.errors import RlkeepError
from rlkeep.jsonio import write_json
from rlkeep.records import JobRecord
from rlkeep.regions import check_transfer, store_to_local
from rlkeep.storage import ObjectInfo, Store, open_store
from rlkeep.sync import (chain_attempts, check_run_space, enforce_skip_policy, is_weight_or_dump, line_count,
                         parse_exclusions, trainer_logs, trial_counts)
from rlkeep.tarstream import TarOutput, TarStats, add_bytes, refuse_denied, stream_objects_into_tar
from rlkeep.world import REMEDY_MARK

log = logging.getLogger(__name__)

# LongLived keeps what a step holds for its whole run out of the cyclic garbage collector's rescans.
#
# CPython's collector rescans every tracked object that has reached its oldest generation at each
# full collection, and a step that keeps one record per listed object (a sync's listing) while it
# allocates per object (requests, bodies, parsed pages) triggers full collections as it goes: each
# walks the whole listing again. Moving what is alive once the listing is built into the permanent
# generation (gc.freeze) leaves the collections only the objects made since; they are given back
# (gc.unfreeze) when the step is done with them, so a step run inside a longer process (a test)
# frees them as usual.
class LongLived:
    """`with LongLived() as heap:` ... `heap.settle()` once the long-lived records are built.

    Inside an outer freeze (someone else's gc.freeze) it does nothing: unfreezing at the end
    would undo theirs."""

    def __enter__(self) -> "LongLived":
        self.owned = gc.get_freeze_count() == 0
        return self

    def settle(self) -> None:
        """Everything alive now is out of the collector's rescans until the `with` ends."""
        if self.owned:
            gc.freeze()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.owned:
            gc.unfreeze()


SETTLE_EVERY = 1000  # listed objects between two heap.settle() calls: a listing page


def sync_traces_step(ctx: StepContext) -> None:
    """`<job>/sync/trace_jobs.tar` + manifest: the whole trace prefix, member names relative to it."""
    settings = ctx.settings
    spec = ctx.record.spec
    if spec.trace_tree is None or "traces" not in ctx.record.layout:
        raise RlkeepError(f"{ctx.record.path}: a {spec.name} run has no trace tree; sync_traces does not apply to it")
    with LongLived() as heap:
        heap.settle()  # the imported libraries' objects
        traces_url = ctx.record.store_url("traces")
        store = open_store(traces_url)
        traces_folder = ctx.record.layout["traces"].strip("/")
        traces_prefix = f"{traces_folder}/" if traces_folder else ""
        listed, others = _trace_listing(open_store(ctx.record.store), traces_prefix, heap)
        exclusions = parse_exclusions(settings.get("exclude", []))
        chosen, skipped = [], []
        for info in listed:
            rule = next((e for e in exclusions if e.matches(info)), None)
            if rule is None:
                chosen.append(info)
            else:
                skipped.append({"key": info.key, "size": info.size, "reason": rule.reason})
        if not listed:
            raise RlkeepError(f"{traces_url}: no trace objects under this prefix; check the record's store and layout.traces")
        log.info("%s: %d objects listed, %d to sync, %d excluded", traces_url, len(listed), len(chosen), len(skipped))
        heap.settle()  # the listing, kept to the end
        space = check_run_space(ctx, chain(others, (ObjectInfo(traces_prefix + info.key, info.size) for info in listed)),
                                f"trace sync from {traces_url}")
        del others
        check_transfer(ctx, nbytes=sum(info.size for info in chosen), what=f"trace sync from {traces_url}", **store_to_local(ctx))
        require_free(ctx.outputs["tar"], sum(info.size for info in chosen) + TAR_OVERHEAD_PER_MEMBER * (len(chosen) + 2),
                     f"trace sync from {traces_url}")

        stats = TarStats(objects_skipped=skipped)
        with TarOutput(ctx.outputs["tar"]) as (tar, hasher):
            stream_objects_into_tar(tar, store, chosen, lambda info: info.key, stats=stats,
                                    workers=int(settings.get("workers", 16)),
                                    max_inflight_bytes=int(settings.get("max_inflight_mb", 128)) << 20,
                                    label="trace sync")
            refuse_denied(stats, traces_url)
            enforce_skip_policy(stats.objects_skipped, settings.get("skip_policy", {}), traces_url)
        manifest = {
            "status": "completed",
            "source": traces_url,
            "tar": ctx.outputs["tar"].name,
            "objects_listed": len(listed),
            "objects_synced": stats.objects_synced,
            "bytes": stats.bytes,
            "sha256": hasher.digest.hexdigest(),
            "tar_bytes": hasher.size,
            "objects_skipped": sorted(stats.objects_skipped, key=lambda s: s["key"]),
            "kind": spec.name,
            "trial_depth": spec.trial_depth,
            **trial_counts((info.key for info in listed), spec.trial_depth),
            "trials_completed_in_tar": trial_counts((o["key"] for o in stats.objects), spec.trial_depth)["trials_completed"],
            "space": space,
            "objects": stats.objects,
        }
        write_json(ctx.outputs["manifest"], manifest)


def _listing(store: Store, heap: LongLived) -> Iterator[ObjectInfo]:
    """Every object of the store, its key and size only, for a caller that keeps them all: the heap
    is settled as they accumulate, since each parsed page promotes enough short-lived objects to
    start full collections, which would otherwise rescan the records kept so far."""
    for count, info in enumerate(store.list(), 1):
        if count % SETTLE_EVERY == 0:
            heap.settle()
        yield ObjectInfo(info.key, info.size)


def _trace_listing(root: Store, traces_prefix: str, heap: LongLived) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
    """One listing of the record's store: (the trace objects, keys relative to the trace prefix;
    every other object). The run-space check needs the whole store and the sync the trace tree:
    listing both would list the trace tree twice."""
    traces: list[ObjectInfo] = []
    others: list[ObjectInfo] = []
    cut = len(traces_prefix)
    for info in _listing(root, heap):
        if info.key.startswith(traces_prefix):
            traces.append(ObjectInfo(info.key[cut:], info.size))
        else:
            others.append(info)
    return traces, others


def _attempt_states(ctx: StepContext) -> dict[str, str]:
    """Each attempt's scheduler state from chain.json (by slug), for the logs manifest."""
    return {str(a["slug"]): str(a.get("state", "unknown")) for a in chain_attempts(ctx)}


def _require_store_logs(record: JobRecord, listed: list[ObjectInfo]) -> None:
    """A run whose trainer logs only the store keeps (scheduler none: rlkeep.sync.trainer_logs reads
    `<layout.logs>/<attempt>.out`), of a kind that requires them, with no object under layout.logs:
    the record names the wrong store or folder; blocked in the record's words, never a completed sync."""
    if record.scheduler != "none" or not record.spec.trainer_log_required:
        return
    logs_prefix = record.layout["logs"].strip("/") + "/"
    if any(info.key.startswith(logs_prefix) for info in listed):
        return
    raise RlkeepError(f"{record.path}: field 'store' is '{record.store}' and layout.logs is "
                      f"'{record.layout['logs']}': no object under {record.url_of(logs_prefix)}/ ({len(listed)} "
                      "listed elsewhere), where a scheduler none run keeps each attempt's trainer log."
                      f"{REMEDY_MARK}correct the record's store: or layout.logs to where the run wrote its "
                      "logs, then rerun")


def sync_logs_step(ctx: StepContext) -> None:
    """`<job>/sync/logs.tar` + manifest: trainer logs per attempt + every durable non-weight artifact."""
    settings = ctx.settings
    record = ctx.record
    with LongLived() as heap:
        heap.settle()  # the imported libraries' objects
        store = open_store(record.store)
        traces = record.layout.get("traces")  # synced on its own by sync_traces; absent for sft
        traces_prefix = traces.strip("/") + "/" if traces else None
        everything = list(_listing(store, heap))
        listed = [info for info in everything if traces_prefix is None or not info.key.startswith(traces_prefix)]
        _require_store_logs(record, listed)
        chosen, skipped = [], []
        for info in listed:
            reason = is_weight_or_dump(info.key)
            if reason is None:
                chosen.append(info)
            else:
                skipped.append({"key": info.key, "size": info.size, "reason": reason})
        space = check_run_space(ctx, everything, f"log sync from {record.store}")
        del everything  # the trace tree's records: sync_traces syncs it

        check_transfer(ctx, nbytes=sum(info.size for info in chosen), what=f"log sync from {record.store}", **store_to_local(ctx))
        require_free(ctx.outputs["tar"], sum(info.size for info in chosen) + TAR_OVERHEAD_PER_MEMBER * (len(chosen) + 2),
                     f"log sync from {record.store}")
        stats = TarStats(objects_skipped=skipped)
        attempts = []
        states = _attempt_states(ctx)
        with TarOutput(ctx.outputs["tar"]) as (tar, hasher):
            for slug, data, source, fields in trainer_logs(ctx, store):
                if data is None:
                    attempts.append({"attempt": slug, "state": states.get(slug), "member": None, "source": None,
                                     "note": source, **fields})
                    continue
                # An empty log (a pod that never wrote a line) is preserved as it is: a dead attempt is
                # data; the metric surface names it and takes no rows from it.
                name = f"attempts/{slug}/trainer.log"
                add_bytes(tar, name, data)
                attempts.append({"attempt": slug, "state": states.get(slug), "member": name, "source": source,
                                 "bytes": len(data), "lines": line_count(data),
                                 "sha256": hashlib.sha256(data).hexdigest(), **fields})
                if not data.strip():
                    log.info("%s: the trainer log of attempt %s is empty (%d bytes, state %s): preserved as it is",
                             source, slug, len(data), states.get(slug) or "unknown")
            stream_objects_into_tar(tar, store, chosen, lambda info: f"store/{info.key}", stats=stats,
                                    workers=int(settings.get("workers", 16)),
                                    max_inflight_bytes=int(settings.get("max_inflight_mb", 128)) << 20,
                                    label="log sync")
            refuse_denied(stats, record.store)
            enforce_skip_policy(stats.objects_skipped, settings.get("skip_policy", {}), record.store)
        manifest = {
            "status": "completed",
            "source": record.store,
            "tar": ctx.outputs["tar"].name,
            "attempts": attempts,
            "objects_listed": len(listed),
            "objects_synced": stats.objects_synced,
            "bytes": stats.bytes + sum(a.get("bytes", 0) for a in attempts),
            "sha256": hasher.digest.hexdigest(),
            "tar_bytes": hasher.size,
            "objects_skipped": sorted(stats.objects_skipped, key=lambda s: s["key"]),
            "space": space,
            "objects": stats.objects,
        }
        write_json(ctx.outputs["manifest"], manifest)
