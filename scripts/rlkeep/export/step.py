"""The pipeline step: `<job>/model/` + `<job>/export.json` from the selected step in the store."""
from __future__ import annotations

import os
import shutil
from typing import Any

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.export.consolidate import consolidate
from rlkeep.export.detect import choose_source
from rlkeep.export.layout import log


def _step_listing(store: Any, prefix: str) -> dict[str, int]:
    """Relative path -> size of everything under one step folder of the store."""
    return {info.key[len(prefix) + 1:]: info.size for info in store.list(prefix)}


def export_model_step(ctx: StepContext) -> None:
    """`<job>/model/` + `<job>/export.json`: detect the selected step's format from the store listing,
    download only what consolidation needs, consolidate to a flat verified model, record provenance."""
    from rlkeep.jsonio import read_json, write_json
    from rlkeep.regions import check_transfer, store_to_local
    from rlkeep.diskspace import require_free
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
    # Resumable: a file already downloaded whole is kept, but only while the store still holds that
    # very object (same size, ETag and time): a source replaced after a refused export is read again.
    sources_path = src_dir.with_name(f"{src_dir.name}.sources.json")
    identity = {info.key[len(prefix) + 1:]: [info.size, info.etag, info.last_modified] for info in store.list(prefix)}
    downloaded = read_json(sources_path) if sources_path.is_file() else {}

    def kept(name: str) -> bool:
        target = src_dir / name
        return target.is_file() and target.stat().st_size == sizes[name] and downloaded.get(name) == identity.get(name)

    require_free(src_dir, sum(sizes[name] for name in needed if not kept(name)),
                 f"checkpoint download from {record.url_of(prefix)}")
    for name in needed:
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
    log.info("export: %s from %s/%s (%d files)", detection.format, record.store, prefix, len(needed))
    model_dir = ctx.outputs["model"]
    if model_dir.exists() and not any(model_dir.iterdir()):
        model_dir.rmdir()
    # A consolidation killed mid-way leaves its temp folder (a model's size); Snakemake's lock makes
    # this step the only writer of model_dir, so any such sibling is a leftover.
    for stale in model_dir.parent.glob(f".{model_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
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
    sources_path.unlink(missing_ok=True)
