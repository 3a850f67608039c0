"""The pipeline step: `<job>/model/` + `<job>/export.json` from the selected step in the store."""
from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.export.consolidate import consolidate, consolidate_source
from rlkeep.export.detect import Detection, choose_source
from rlkeep.export.fsdp_store import fsdp_store_source
from rlkeep.export.layout import RANK_FILE, log


def _step_listing(store: Any, prefix: str) -> dict[str, int]:
    """Relative path -> size of everything under one step folder of the store."""
    return {info.key[len(prefix) + 1:]: info.size for info in store.list(prefix)}


def export_model_step(ctx: StepContext) -> None:
    """`<job>/model/` + `<job>/export.json`: detect the selected step's format from the store listing,
    download what consolidation needs (an FSDP checkpoint's rank files are read in place), consolidate to a
    flat verified model, record provenance."""
    from rlkeep.jsonio import read_json, write_json
    from rlkeep.regions import check_transfer, store_to_local
    from rlkeep.storage import open_store

    selected = read_json(ctx.inputs["selected"])
    step = int(selected["step"])
    record = ctx.record
    store = open_store(record.store)
    prefixes = {"export": f"{record.layout['exports'].strip('/')}/global_step_{step}",
                "ckpt": f"{record.layout['ckpts'].strip('/')}/global_step_{step}"}
    listings = {name: _step_listing(store, prefix) for name, prefix in prefixes.items()}
    detection = choose_source(listings["export"] or None, listings["ckpt"] or None)
    if not detection.consolidatable:
        raise RlkeepError(f"{record.url_of(prefixes.get(detection.source, prefixes['ckpt']))}: "
                          f"{detection.format} checkpoint of step {step} cannot be consolidated here: {detection.reason}")
    prefix = prefixes[detection.source]
    sizes = listings[detection.source]
    needed = sorted(detection.needed_files)
    check_transfer(ctx, nbytes=sum(sizes[name] for name in needed), what=f"checkpoint download from {record.url_of(prefix)}",
                   **store_to_local(ctx))

    src_dir = ctx.work_dir("export") / f"global_step_{step}-{detection.source}"
    identity = {info.key[len(prefix) + 1:]: [info.size, info.etag, info.last_modified] for info in store.list(prefix)}
    # FSDP rank files are read in place in the store, straight into the model's shards: the model's bytes
    # are on disk once. An HF export is downloaded whole; its shards are then linked into the model.
    in_place = detection.format == "fsdp"
    fetched = [name for name in needed if not (in_place and RANK_FILE.fullmatch(name.rpartition("/")[2]))]
    _download(store, prefix, fetched, sizes, identity, src_dir, record.url_of(prefix))
    log.info("export: %s from %s/%s (%d files, %d read in place)", detection.format, record.store, prefix,
             len(needed), len(needed) - len(fetched))
    model_dir = ctx.outputs["model"]
    if model_dir.exists() and not any(model_dir.iterdir()):
        model_dir.rmdir()
    # A consolidation killed mid-way leaves its temp folder (a model's size); Snakemake's lock makes
    # this step the only writer of model_dir, so any such sibling is a leftover.
    for stale in model_dir.parent.glob(f".{model_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if in_place:
        report = _consolidate_in_place(store, prefix, {name: sizes[name] for name in needed}, identity, src_dir,
                                       model_dir, detection, record.url_of(prefix))
    else:
        report = consolidate(src_dir, model_dir, detection=detection)
    write_json(ctx.outputs["export"], {
        **report,
        "source_local": report["source"],
        "status": "completed",
        "step": step,
        "format": detection.format,
        "source": record.url_of(prefix),
        "source_keys": [f"{prefix}/{name}" for name in needed],
        "detection": detection.to_dict(),
    })
    shutil.rmtree(src_dir, ignore_errors=True)
    src_dir.with_name(f"{src_dir.name}.sources.json").unlink(missing_ok=True)


def _download(store: Any, prefix: str, names: Sequence[str], sizes: Mapping[str, int],
              identity: Mapping[str, Any], src_dir: Path, url: str) -> None:
    """Download `names` of the step folder into src_dir. Resumable: a file already downloaded whole is
    kept, but only while the store still holds that very object (same size, ETag and time): a source
    replaced after a refused export is read again."""
    from rlkeep.diskspace import require_free
    from rlkeep.jsonio import read_json, write_json

    sources_path = src_dir.with_name(f"{src_dir.name}.sources.json")
    downloaded = read_json(sources_path) if sources_path.is_file() else {}

    def kept(name: str) -> bool:
        target = src_dir / name
        return target.is_file() and target.stat().st_size == sizes[name] and downloaded.get(name) == identity.get(name)

    require_free(src_dir, sum(sizes[name] for name in names if not kept(name)), f"checkpoint download from {url}")
    for name in names:
        target = src_dir / name
        if kept(name):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.part")
        try:
            with open(partial, "wb") as handle:
                store.read_into(f"{prefix}/{name}", handle)
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)  # stopped or out of space: no half file stays behind
            raise
        downloaded[name] = identity.get(name)
        write_json(sources_path, downloaded)


def _consolidate_in_place(store: Any, prefix: str, sizes: Mapping[str, int], identity: Mapping[str, Any],
                          src_dir: Path, model_dir: Path, detection: Detection, url: str) -> dict[str, Any]:
    """The model from FSDP rank files read by ranged GETs; refused (and removed) when a rank file
    changed in the store while it was read, since its pieces came from several reads."""
    source = fsdp_store_source(store, prefix, sizes, src_dir, detection)
    report = consolidate_source(source, model_dir, detection=detection, origin=url, sizes=sizes)
    now = {info.key[len(prefix) + 1:]: [info.size, info.etag, info.last_modified] for info in store.list(prefix)}
    changed = sorted(name for name in sizes if now.get(name) != identity.get(name))
    if changed:
        shutil.rmtree(model_dir, ignore_errors=True)
        raise RlkeepError(f"{url}: {', '.join(changed)} changed in the store while the model was read from it; "
                          "the model written from them was removed. Rerun the same command")
    return report
