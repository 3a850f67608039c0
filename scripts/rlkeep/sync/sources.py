"""What each sync copies and from where: the exclusions (weights, core dumps, caches), the trial
counts of a trace tree, the skip policy, the run's disk need checked before the first byte, and
every attempt's trainer log (from the scheduler's command line or the store).

Sync as a whole: every attempt's logs and the full durable trace tree, tar then transfer
(the tar itself is rlkeep.tarstream's; the steps rlkeep.sync.step's).

Objects are listed completely (every page), fetched concurrently and written straight into
one tar in key order: no temporary tree of thousands of files, memory bounded by the fetch
window. Each object's size and sha256 are checked against the listing while streaming. The
tar and its manifest are written under temporary names and renamed only when complete, so
an interrupted sync leaves no partial target. A skip is never silent: every object left out
is in the manifest's objects_skipped with its key, size and reason.
"""
from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import read_json
from rlkeep.diskspace import require_run_space, run_space_need
from rlkeep.scheduler import IrisCli, JobGoneError, LogFetch, scheduler_for
from rlkeep.context import StepContext
from rlkeep.storage import ObjectInfo, Store

log = logging.getLogger(__name__)

# Never copied into the logs tar: weights, checkpoint shards, optimizer states, core dumps, caches.
WEIGHT_PATTERNS = ("*.safetensors", "*.pt", "*.pth", "*.bin", "*.ckpt", "*.distcp", "*.npy", "*.npz", "*.gguf")
CORE_DUMP_PATTERNS = ("core", "core.*", "*.core", "*.hprof", "*.dmp", "*.mdmp")
CACHE_PARTS = ("__pycache__", ".venv", ".cache", "site-packages", ".mypy_cache", ".pytest_cache")


@dataclass(frozen=True)
class Exclusion:
    pattern: str  # fnmatch on the object's base name
    min_bytes: int = 0  # only objects at least this large
    reason: str = "excluded"

    def matches(self, info: ObjectInfo) -> bool:
        return info.size >= self.min_bytes and fnmatch.fnmatch(info.key.rsplit("/", 1)[-1], self.pattern)


def trial_counts(keys: Iterable[str], depth: int = 1) -> dict[str, int]:
    """Trials started (any object under a trial dir) and completed (it has `result.json`).

    depth: path components from the trace tree to a trial (`<trial>/` 1; eval's `<name>/<trial>/` 2).
    """
    started: set[str] = set()
    completed: set[str] = set()
    for key in keys:
        parts = key.split("/")
        if len(parts) <= depth:
            continue  # a file above the trials (an eval job's own result.json, job.log)
        trial, rest = "/".join(parts[:depth]), "/".join(parts[depth:])
        started.add(trial)
        if rest == "result.json":
            completed.add(trial)
    return {"trials_started": len(started), "trials_completed": len(completed),
            "trials_incomplete": len(started - completed)}


def parse_exclusions(items: Iterable[dict[str, Any]]) -> list[Exclusion]:
    return [Exclusion(pattern=str(i["pattern"]), min_bytes=int(i.get("min_bytes", 0)),
                      reason=str(i.get("reason", f"excluded_{i['pattern']}"))) for i in items]


def enforce_skip_policy(skipped: list[dict[str, Any]], policy: dict[str, Any], what: str) -> None:
    missing = [s for s in skipped if s["reason"] == "missing_after_listing"]
    allowed_missing = int(policy.get("max_missing_after_listing", 0))
    if len(missing) > allowed_missing:
        first = missing[0]
        raise RlkeepError(
            f"{what}: {len(missing)} objects vanished between listing and fetch (allowed: {allowed_missing}), "
            f"e.g. {first['key']} ({first['size']} bytes); the store is still changing: rerun once it is quiet, "
            f"or raise sync.skip_policy.max_missing_after_listing"
        )
    limit = policy.get("max_skipped")
    if limit is not None and len(skipped) > int(limit):
        raise RlkeepError(f"{what}: {len(skipped)} objects skipped, more than sync.skip_policy.max_skipped = {limit}")


def check_run_space(ctx: StepContext, listed: Iterable[ObjectInfo], what: str) -> dict[str, int]:
    """Both syncs, before their first byte: the whole run's peak on the data root, from the listing
    of the record's store (each sync checks it, so neither starts when the run cannot finish)."""
    layout = ctx.record.layout
    need = run_space_need(((info.key, info.size) for info in listed), traces_prefix=layout.get("traces"),
                          ckpts_prefix=layout.get("ckpts"), exports_prefix=layout.get("exports"),
                          left_out=is_weight_or_dump)
    still, free = require_run_space(ctx.job_dir, need, what)
    log.info("%s: the run needs %d bytes on the data root at its peak (%d more than its job folder holds), "
             "%d are free", what, need["needed_bytes"], still, free)
    return need


# --------------------------------------------------------------------------- the trace tree


# --------------------------------------------------------------------------- logs and durable artifacts


def is_weight_or_dump(key: str) -> str | None:
    """Why a store object never goes into the logs tar, or None if it is informative."""
    name = key.rsplit("/", 1)[-1]
    parts = key.split("/")
    if any(part in CACHE_PARTS for part in parts):
        return "excluded_cache"
    if any(fnmatch.fnmatch(name, pattern) for pattern in WEIGHT_PATTERNS):
        return "excluded_weights"
    if any(fnmatch.fnmatch(name, pattern) for pattern in CORE_DUMP_PATTERNS):
        return "excluded_core_dump"
    return None


def trainer_logs(ctx: StepContext, store: Store) -> Iterator[tuple[str, bytes | None, str, dict[str, Any]]]:
    """(attempt slug, full trainer stdout or None, where it came from or why it is absent, fields
    for the attempt's logs-manifest entry) per attempt.

    Iris: `iris job logs` when the CLI proves the log complete (scheduler.IrisCli.logs), else
    the store's `<layout.logs>/<attempt>.out` (also for an attempt the controller forgot),
    else the CLI's unproven log with the reason; {"completeness": …} says which and why. An
    attempt the controller forgot and the store has no log of is noted, never a blocker: nothing
    could ever bring its log back. SLURM: the attempt's StdOut path from scontrol (chain.json) on the shared
    filesystem, else `<layout.logs>/<attempt>.out` in the store. none: the store's file.
    An absent log fails the step only for kinds that need it (rl); the others note it (the
    store sync already captures every `.out`).
    """
    record = ctx.record
    scheduler = scheduler_for(record)
    cli = scheduler.log_cli()
    if cli is not None:
        yield from _cli_trainer_logs(ctx, store, cli)
        return
    stdout_paths = scheduler.stdout_paths(chain_attempts(ctx))
    for slug in record.attempts:
        tried = []
        path = stdout_paths.get(slug)
        if path:
            try:
                yield slug, Path(path).read_bytes(), path, {}
                continue
            except OSError as error:
                tried.append(f"{path} ({error.strerror or error})")
        key = f"{record.layout['logs']}/{slug}.out"
        try:
            yield slug, store.read_bytes(key), record.url_of(key), {}
            continue
        except Exception as error:  # noqa: BLE001 - any failure here is the same missing log
            tried.append(f"{record.url_of(key)} ({error})")
        if record.spec.trainer_log_required:
            raise RlkeepError(f"trainer log of attempt {slug} not readable: {'; '.join(tried)}; scheduler "
                              f"{record.scheduler} reads the StdOut path (slurm) or logs/<attempt>.out from the store")
        yield slug, None, "not found at " + "; ".join(tried), {}


def _cli_trainer_logs(ctx: StepContext, store: Store,
                      iris: IrisCli) -> Iterator[tuple[str, bytes | None, str, dict[str, Any]]]:
    record = ctx.record
    for job_id, slug in zip(record.chain, record.attempts):
        gone = False
        try:
            fetch = iris.logs(job_id)
        except JobGoneError as error:
            gone = True
            fetch = LogFetch(None, False, f"{job_id} is gone from the controller ({error})", None)
        cli = {"cli": fetch.form} if fetch.form else {}
        if fetch.complete and fetch.text is not None:
            yield (slug, fetch.text.encode("utf-8", "surrogateescape"), f"iris job logs {job_id}",
                   {"completeness": {"status": "proven", "how": fetch.detail, **cli}})
            continue
        key = f"{record.layout['logs']}/{slug}.out"
        try:
            data = store.read_bytes(key)
        except Exception as error:  # noqa: BLE001 - any failure here is the same missing copy
            data, store_why = None, f"no store copy at {record.url_of(key)} ({error})"
        if data == b"" and fetch.text is not None:  # two empty answers: the CLI's names the attempt
            data, store_why = None, f"the store copy {record.url_of(key)} is empty too"
        if data is not None:
            yield (slug, data, record.url_of(key),
                   {"completeness": {"status": "store_copy", "how": "the store's copy of the attempt's log; the CLI's "
                                     f"could not be proven complete: {fetch.detail}", **cli}})
            continue
        if fetch.text is not None:
            yield (slug, fetch.text.encode("utf-8", "surrogateescape"), f"iris job logs {job_id}",
                   {"completeness": {"status": "unproven", "why": f"{fetch.detail}; {store_why}", **cli}})
            continue
        why = f"{fetch.detail}; {store_why}"
        if record.spec.trainer_log_required and not gone:
            raise RlkeepError(f"trainer log of attempt {slug} ({job_id}) cannot be read whole: {why}")
        yield slug, None, why, {"completeness": {"status": "unavailable", "why": why, **cli}}


def chain_attempts(ctx: StepContext) -> list[dict[str, Any]]:
    """The attempts of chain.json (an input of sync_logs), each with its slug."""
    chain_path = ctx.inputs.get("chain")
    if chain_path is None or not Path(chain_path).is_file():
        return []
    return [a for a in read_json(chain_path).get("attempts", []) if isinstance(a, dict) and a.get("slug")]


def line_count(data: bytes) -> int:
    """Lines in a log, the last one counted even without its newline."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
