"""Reclaim a run's source storage: only under authority, only after verification, only our keys.

What may be deleted is exactly what the sync step listed (objects synced + objects skipped
in the two sync manifests), mapped back to full keys under the record's store. Nothing is
sized or listed recursively before the delete: the sizes come from the manifests. Objects
written after the sync, or anything outside `record.store`, are never in the plan.

The delete runs in batches. Before each batch, one listing of just that batch's key range
tells which planned objects still exist and whether one was rewritten since the sync (its
size differs: it is not the object that was archived, so it is kept and reported). Progress
is journaled after every batch (atomic JSON), so a killed reclaim resumes where it stopped.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError, StoreError
from rlkeep.jsonio import read_json, write_json
from rlkeep.storage import FileStore, S3Store, Store, check_key, open_store, s3_client

PRESENT_STATUSES = ("completed", "not_applicable")
AUTHORITY_HINT = "pass --config reclaim_authorized=<job> for exactly this job on the command line"
DEFAULT_BATCH = 1000  # S3 DeleteObjects takes at most 1,000 keys


# --------------------------------------------------------------------------- the decision


def reclaim_decision(*, authorized: bool, verify_sentinels: dict[str, dict[str, Any] | None],
                     required: tuple[str, ...]) -> tuple[bool, str]:
    """(act?, why): act only with authority AND every required verify sentinel present.

    required: the run kind's verify sentinels (rlkeep.pipeline.verify_sentinels, the step table's
    `verify` column); any other sentinel given must be present too.
    """
    problems: list[str] = []
    if authorized is not True:
        problems.append(f"reclamation is not authorized for this job ({AUTHORITY_HINT})")
    names = list(required) + sorted(set(verify_sentinels) - set(required))
    missing, invalid, present = [], [], []
    for name in names:
        sentinel = verify_sentinels.get(name)
        if sentinel is None:
            missing.append(name)
        elif not isinstance(sentinel, dict) or sentinel.get("status") not in PRESENT_STATUSES:
            status = sentinel.get("status") if isinstance(sentinel, dict) else type(sentinel).__name__
            invalid.append(f"{name} ({status!r})")
        else:
            present.append(f"{name} {sentinel['status']}")
    if missing:
        problems.append("verify sentinel missing: " + ", ".join(f"verify/{name}.json" for name in missing))
    if invalid:
        problems.append("verify sentinel not completed or not_applicable: " + ", ".join(invalid))
    if problems:
        return False, "; ".join(problems)
    return True, "authorized for this job and verified: " + ", ".join(present)


def awaits_authority(evidence: dict[str, Any]) -> bool:
    """Whether reclaim.json says nothing was deleted because the invocation did not grant it."""
    return evidence.get("status") == "not_applicable" and AUTHORITY_HINT in str(evidence.get("reason") or "")


# --------------------------------------------------------------------------- the plan


def _manifest_sources(record: Any) -> dict[str, tuple[str, str]]:
    """Manifest name -> (expected `source` URL, key prefix under record.store)."""
    sources = {"logs": (record.store, "")}
    traces = record.layout.get("traces")  # absent for a kind without a trace tree (sft)
    if traces:
        traces = traces.strip("/")
        sources["traces"] = (record.url_of(traces), f"{traces}/")
    return sources


def _entries(manifest: dict[str, Any], field: str, where: str) -> list[tuple[str, int]]:
    items = manifest.get(field)
    if not isinstance(items, list):
        raise RlkeepError(f"{where}: field '{field}' is missing or not a list; expected the sync manifest's {field}")
    entries = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise RlkeepError(f"{where}: field '{field}[{index}]' has no string 'key'")
        size = item.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RlkeepError(f"{where}: field '{field}[{index}].size' is {size!r} for key {item['key']!r}; "
                              "expected a byte count >= 0")
        try:
            check_key(item["key"], where=f"{where}: field '{field}[{index}]'")
        except StoreError as error:
            raise RlkeepError(str(error)) from None
        entries.append((item["key"], size))
    return entries


def plan_id(store: str, objects: Iterable[dict[str, Any]]) -> str:
    digest = hashlib.sha256(store.encode("utf-8") + b"\n")
    for item in objects:
        digest.update(f"{item['key']}\t{item['size']}\n".encode("utf-8"))
    return digest.hexdigest()


def plan_reclaim(record: Any, manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Exactly the keys the sync manifests list, as keys under `record.store`, with their sizes.

    manifests: {"logs": <logs.manifest.json>, "traces": <trace_jobs.manifest.json>} (either or both).
    """
    sources = _manifest_sources(record)
    if not isinstance(manifests, dict) or not manifests:
        raise RlkeepError("reclaim plan: no sync manifests given; expected logs and/or traces")
    unknown = sorted(set(manifests) - set(sources))
    if unknown:
        raise RlkeepError(f"reclaim plan: unknown manifest name(s) {unknown}; expected {', '.join(sorted(sources))}")
    by_key: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for name in sorted(manifests):
        manifest = manifests[name]
        where = f"{name} sync manifest"
        if not isinstance(manifest, dict):
            raise RlkeepError(f"{where}: expected a JSON object")
        expected_source, prefix = sources[name]
        if manifest.get("status") != "completed":
            raise RlkeepError(f"{where}: field 'status' is {manifest.get('status')!r}; expected completed")
        source = manifest.get("source")
        if not isinstance(source, str) or source.rstrip("/") != expected_source:
            raise RlkeepError(f"{where}: field 'source' is {source!r}; expected {expected_source} "
                              f"(this job's store); refusing to plan deletes for another location")
        synced = _entries(manifest, "objects", where)
        skipped = _entries(manifest, "objects_skipped", where)
        listed = manifest.get("objects_listed")
        if listed != len(synced) + len(skipped):
            raise RlkeepError(f"{where}: field 'objects_listed' is {listed!r} but the manifest has {len(synced)} objects "
                              f"and {len(skipped)} objects_skipped; expected the sum (an incomplete manifest)")
        if manifest.get("objects_synced") != len(synced):
            raise RlkeepError(f"{where}: field 'objects_synced' is {manifest.get('objects_synced')!r} but 'objects' "
                              f"lists {len(synced)}")
        counts[name] = 0
        for key, size in synced + skipped:
            full = prefix + key
            known = by_key.get(full)
            if known is not None:
                if known["size"] != size:
                    raise RlkeepError(f"{where}: key {key!r} listed with {size} bytes, elsewhere with {known['size']}")
                continue
            by_key[full] = {"key": full, "size": size, "manifest": name}
            counts[name] += 1
    objects = [by_key[key] for key in sorted(by_key, key=lambda k: k.encode("utf-8"))]
    store = record.store
    return {
        "job": record.job,
        "store": store,
        "plan_id": plan_id(store, objects),
        "manifests": counts,
        "keys": len(objects),
        "bytes": sum(o["size"] for o in objects),
        "objects": objects,
    }


# --------------------------------------------------------------------------- execution


def _check_plan(plan: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(plan, dict) or not isinstance(plan.get("store"), str) or not isinstance(plan.get("objects"), list):
        raise RlkeepError("reclaim plan: expected a plan from plan_reclaim (fields store, objects, plan_id)")
    store, objects = plan["store"], plan["objects"]
    for index, item in enumerate(objects):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or not isinstance(item.get("size"), int):
            raise RlkeepError(f"reclaim plan: objects[{index}] is not {{key, size}}")
        check_key(item["key"], where=f"reclaim plan objects[{index}]")
    keys = [item["key"] for item in objects]
    if keys != sorted(set(keys), key=lambda k: k.encode("utf-8")):
        raise RlkeepError("reclaim plan: objects are not unique and sorted; rebuild it with plan_reclaim")
    if plan.get("plan_id") != plan_id(store, objects):
        raise RlkeepError("reclaim plan: plan_id does not match its objects; the plan was edited; rebuild it")
    return store, objects


def current_sizes(store: Store, keys: list[str]) -> dict[str, int]:
    """Sizes of those of `keys` (sorted) that exist now: one listing of just their key range on S3."""
    if not keys:
        return {}
    if isinstance(store, FileStore):
        found = {}
        for key in keys:
            path = store.root / key
            if path.is_file():
                found[key] = path.stat().st_size
        return found
    if not isinstance(store, S3Store):
        raise RlkeepError(f"{store.url}: reclaim supports s3:// and file:// stores only")
    root = f"{store.prefix}/" if store.prefix else ""
    first, last = root + keys[0], root + keys[-1]
    wanted = set(keys)
    found = {}
    # StartAfter is exclusive: start just before the first key (a proper prefix of it sorts first).
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Prefix": root}
    if first[:-1]:
        kwargs["StartAfter"] = first[:-1]
    while True:
        try:
            page = s3_client().list_objects_v2(**kwargs)
        except Exception as error:  # noqa: BLE001 - reported with the store and range
            raise StoreError(f"{store.url}: listing {keys[0]}..{keys[-1]} before deleting failed: {error}") from None
        contents = page.get("Contents", [])
        for entry in contents:
            key = entry["Key"][len(root):]
            if key in wanted:
                found[key] = int(entry["Size"])
        if not page.get("IsTruncated") or not contents or contents[-1]["Key"] >= last:
            return found
        kwargs["ContinuationToken"] = page["NextContinuationToken"]


def _new_journal(plan: dict[str, Any], batch_size: int) -> dict[str, Any]:
    return {"plan_id": plan["plan_id"], "store": plan["store"], "batch_size": batch_size, "batches_total": 0,
            "batches_done": 0, "deleted_keys": 0, "deleted_bytes": 0, "missing": [], "changed": [], "finished": False}


def _load_journal(path: Path, plan: dict[str, Any], batch_size: int) -> dict[str, Any]:
    if not path.exists():
        return _new_journal(plan, batch_size)
    try:
        journal = read_json(path)
    except (OSError, ValueError) as error:
        raise RlkeepError(f"{path}: reclaim journal unreadable ({error}); inspect it before resuming") from None
    if not isinstance(journal, dict):
        raise RlkeepError(f"{path}: reclaim journal is not a JSON object")
    for field, expected in (("plan_id", plan["plan_id"]), ("store", plan["store"]), ("batch_size", batch_size)):
        if journal.get(field) != expected:
            raise RlkeepError(f"{path}: reclaim journal field '{field}' is {journal.get(field)!r}, this plan has "
                              f"{expected!r}; the journal belongs to another plan: move it aside only if that reclaim is over")
    return journal


def _result(journal: dict[str, Any], journal_path: Path) -> dict[str, Any]:
    return {
        "status": "completed",
        "store": journal["store"],
        "plan_id": journal["plan_id"],
        "deleted_keys": journal["deleted_keys"],
        "deleted_bytes": journal["deleted_bytes"],
        "missing": list(journal["missing"]),
        "kept_changed": list(journal["changed"]),
        "batches": journal["batches_done"],
        "journal": str(journal_path),
    }


def execute_reclaim(
    plan: dict[str, Any],
    journal_path: Path,
    *,
    batch_size: int = DEFAULT_BATCH,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Delete exactly the planned keys, journaling each batch; a rerun resumes from the journal.

    Returns {deleted_keys, deleted_bytes, missing (already gone), kept_changed (rewritten
    since the sync: size differs, so not deleted), ...}. `progress` is called with the
    journal after every batch.
    """
    if not 1 <= batch_size <= DEFAULT_BATCH:
        raise RlkeepError(f"reclaim: batch_size {batch_size}; expected 1..{DEFAULT_BATCH}")
    store_url, objects = _check_plan(plan)
    journal_path = Path(journal_path)
    journal = _load_journal(journal_path, plan, batch_size)
    if journal.get("finished"):
        return _result(journal, journal_path)
    store = open_store(store_url)
    batches = [objects[i:i + batch_size] for i in range(0, len(objects), batch_size)]
    journal["batches_total"] = len(batches)
    for index in range(int(journal["batches_done"]), len(batches)):
        batch = batches[index]
        # Keys an earlier invocation sent in a delete for this batch before it was killed: gone now
        # means deleted by that request (ours), not missing.
        inflight = journal.get("inflight") or {}
        sent = set(inflight.get("keys", [])) if inflight.get("batch") == index else set()
        sizes = current_sizes(store, [item["key"] for item in batch])
        doomed = [item for item in batch if sizes.get(item["key"]) == item["size"]]
        deleted_before = [item for item in batch if item["key"] not in sizes and item["key"] in sent]
        missing = [item["key"] for item in batch if item["key"] not in sizes and item["key"] not in sent]
        changed = [{"key": item["key"], "synced_size": item["size"], "size_now": sizes[item["key"]]}
                   for item in batch if item["key"] in sizes and sizes[item["key"]] != item["size"]]
        # Journaled before the delete goes out, so a kill after it still counts these keys as ours.
        journal["inflight"] = {"batch": index, "keys": sorted(sent | {item["key"] for item in doomed})}
        write_json(journal_path, journal)
        store.delete(item["key"] for item in doomed)
        journal["missing"].extend(missing)
        journal["changed"].extend(changed)
        journal["deleted_keys"] += len(doomed) + len(deleted_before)
        journal["deleted_bytes"] += sum(item["size"] for item in doomed + deleted_before)
        journal["batches_done"] = index + 1
        journal.pop("inflight", None)
        write_json(journal_path, journal)
        if progress is not None:
            progress(journal)
    journal["finished"] = True
    write_json(journal_path, journal)
    return _result(journal, journal_path)


# --------------------------------------------------------------------------- where each deleted object lives on


LOGS_ARCHIVE_PREFIX = "logs/store/"  # sync_logs puts store objects at store/<key>; the archive under logs/


def archive_member(item: dict[str, Any], record: Any) -> str | None:
    """The archive member that holds a planned object (see sync_logs / sync_traces and archive_step)."""
    if item.get("manifest") == "logs":
        return LOGS_ARCHIVE_PREFIX + item["key"]
    traces, tree = record.layout.get("traces"), record.spec.archive_tree
    if item.get("manifest") == "traces" and traces and tree:
        return f"{tree}/{item['key'][len(traces.strip('/')) + 1:]}"
    return None


def _weights_or_checkpoint(key: str, record: Any, sync_reason: str | None) -> bool:
    prefixes = tuple(record.layout[name].strip("/") + "/" for name in ("ckpts", "exports") if name in record.layout)
    return key.startswith(prefixes) or sync_reason == "excluded_weights"


def _sync_skip_reasons(manifests: dict[str, dict[str, Any]], record: Any) -> dict[str, str]:
    prefixes = {"logs": "", "traces": (record.layout.get("traces") or "").strip("/") + "/"}
    return {prefixes[name] + item["key"]: str(item.get("reason")) for name, manifest in manifests.items()
            for item in manifest.get("objects_skipped", []) if isinstance(item, dict) and "key" in item}


def _archive_copy(archive_sentinel: dict[str, Any]) -> dict[str, Any]:
    local = archive_sentinel.get("local") or {}
    remote = archive_sentinel.get("remote")
    copy: dict[str, Any] = {"tgz": local.get("tgz"), "sha256": local.get("sha256")}
    if isinstance(remote, dict):
        copy["remote"] = [{"url": o.get("url"), "sha256": o.get("sha256")} for o in remote.get("objects", [])]
    else:
        copy["remote"] = "none: the record names no archive.dest (the archive is local only)"
    return copy


def preservation(objects: list[dict[str, Any]], *, record: Any, manifests: dict[str, dict[str, Any]],
                 archive_entries: dict[str, str | None], sentinels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Where each class of planned object is preserved, with the sentinel that proves it.

    archive_entries: archive MANIFEST member -> None (kept) or the reason it was left out.
    Classes: run logs and artifacts (archive), trace trees (archive, plus the trace dataset's Hub
    commit), checkpoints and weights (the published model's Hub commit; only deleted once that is
    verified), and what the archive rule leaves out on purpose (not preserved, with the reason).
    Raises RlkeepError for an object no class accounts for (it is then not deleted).
    """
    skip_reasons = _sync_skip_reasons(manifests, record)
    classes: dict[str, dict[str, Any]] = {}
    unaccounted: list[str] = []

    def add(name: str, item: dict[str, Any], **fields: Any) -> None:
        entry = classes.setdefault(name, {"class": name, "keys": 0, "bytes": 0, **fields})
        entry["keys"] += 1
        entry["bytes"] += item["size"]

    archive_sentinel = sentinels.get("archive") or {}
    model, traces = sentinels.get("model") or {}, sentinels.get("traces") or {}
    # the archive's copy is proven by its verification and, once rehearsed, by its restore from there
    archive_proof = "verify/archive.json" + (
        ", verify/restore.json" if (sentinels.get("restore") or {}).get("status") == "completed" else "")
    for item in objects:
        sync_reason = skip_reasons.get(item["key"])
        member = archive_member(item, record)
        if _weights_or_checkpoint(item["key"], record, sync_reason):
            if model.get("status") != "completed":
                unaccounted.append(f"{item['key']} (weights, and the model is not published and verified)")
                continue
            add("checkpoints_and_weights", item, preserved_in={"model": {
                "repo_id": model.get("repo_id"), "commit": model.get("commit"),
                "what": "the selected checkpoint exported as a flat model; optimizer states and other steps' "
                        "weights are not kept"}}, proof="verify/model.json")
        elif member is None or (sync_reason is None and member not in archive_entries):
            unaccounted.append(f"{item['key']} (archive member {member} is not in the archive MANIFEST)")
        elif sync_reason is not None or archive_entries[member] is not None:
            # left out of the sync tar (sync_reason) or of the archive (archive rule) on purpose
            reason = sync_reason or str(archive_entries[member])
            entry = classes.setdefault("not_preserved", {
                "class": "not_preserved", "keys": 0, "bytes": 0, "preserved_in": None, "reasons": {},
                "why": "left out on purpose by the sync's exclusions or the archive rule (caches, core dumps, "
                       "large terminal recordings): not informative"})
            entry["keys"] += 1
            entry["bytes"] += item["size"]
            entry["reasons"][reason] = entry["reasons"].get(reason, 0) + 1
        elif item.get("manifest") == "traces":
            preserved: dict[str, Any] = {"archive": {**_archive_copy(archive_sentinel), "member_prefix": f"{record.spec.archive_tree}/"}}
            if traces.get("status") == "completed":
                preserved["trace_dataset"] = {"repo_id": traces.get("repo_id"), "commit": traces.get("commit"),
                                              "what": "dataset rows rebuilt from these trials"}
            add("trace_trees", item, preserved_in=preserved,
                proof=archive_proof + (", verify/traces.json" if "trace_dataset" in preserved else ""))
        else:
            add("logs_and_run_artifacts", item, preserved_in={"archive": {**_archive_copy(archive_sentinel),
                                                                          "member_prefix": LOGS_ARCHIVE_PREFIX}},
                proof=archive_proof)
    if unaccounted:
        shown = ", ".join(unaccounted[:10]) + (f" and {len(unaccounted) - 10} more" if len(unaccounted) > 10 else "")
        raise RlkeepError(f"reclaim: {len(unaccounted)} planned object(s) are preserved nowhere rlkeep can prove: "
                          f"{shown}; nothing was deleted (rebuild the archive from the current sync, then rerun)")
    return [classes[name] for name in sorted(classes)]


# --------------------------------------------------------------------------- pipeline step
