# What each step is handed as params, so a change reruns what it affects (Snakemake compares params):
# only the record's and the config's fields the step depends on. Records come from rules/common.smk.

from rlkeep.chain_recapture import recapture_settings
from rlkeep.jsonio import key_sorted
from rlkeep.context import is_authorized


def get_chain_settings(wildcards):
    """Only what defines the chain: editing anything else in a record never redoes the sync. A
    capture that is not final is captured again (`recapture`, rlkeep.chain_recapture); the keys
    appear only when set, so a chain captured before they existed is not captured again for them.
    """
    record = get_record(wildcards.job)
    settings = {
        "chain": list(record.chain),
        "scheduler": record.scheduler,
        "cluster": record.cluster,
    }
    if record.chain_excludes:
        settings["chain_excludes"] = list(record.chain_excludes)
    settings.update(recapture_settings(Path(wildcards.job)))
    return key_sorted(settings)


def get_record_digest(wildcards):
    """The completion record restates the whole record: any edit rewrites DONE, and only DONE."""
    return {"record_sha256": get_record_sha256(wildcards.job)}


def get_store_settings(*components):
    """The record's fields a step that reads the store read: the store and the layout folders it
    lists. Correcting `store:` or one of these folders redoes the step and, through its outputs,
    what depends on it; editing another field redoes nothing here."""

    def settings(wildcards):
        record = get_record(wildcards.job)
        return key_sorted(
            {
                "store": record.store,
                "layout": {name: record.layout.get(name) for name in components},
            }
        )

    return settings


def get_sync_settings(kind):
    sync = config["sync"]
    settings = {key: sync[key] for key in ("workers", "max_inflight_mb", "skip_policy")}
    settings.update(sync.get(kind, {}))
    return key_sorted(settings)


def get_selection_settings(wildcards):
    """What reruns select_checkpoint when the record's rule changes (Snakemake compares params); the
    step itself reads the same fields from the record, its one source."""
    record = get_record(wildcards.job)
    return key_sorted(
        {
            "rule": record.selection_rule,
            "behavior_break_step": record.behavior_break_step,
            "interval": record.checkpoint_interval,
        }
    )


def get_publish_settings(wildcards):
    record = get_record(wildcards.job)
    return key_sorted({"publish": record.publish, "base_model": record.base_model})


def get_trace_settings(wildcards):
    return key_sorted(dict(config["traces"]))


def get_archive_settings(wildcards):
    record = get_record(wildcards.job)
    return key_sorted(
        {
            "dest": (record.archive or {}).get("dest"),
            "kind": record.kind,
            **config["archive"],
        }
    )


def get_archive_transfer_settings(wildcards):
    """The archive copy: its destination and the declared regions of both ends (docs/contract.md §6),
    so declaring or changing a region re-checks the copy. The allowance itself is not a param: a
    refused copy leaves no output, so rerunning with --config allow_transfer=<job> runs it.
    """
    record = get_record(wildcards.job)
    archive = record.archive or {}
    return key_sorted(
        {
            **get_archive_settings(wildcards),
            "store_region": record.store_region,
            "archive_region": archive.get("region"),
        }
    )


def get_register_settings(wildcards):
    record = get_record(wildcards.job)
    return key_sorted(
        {
            "register": record.register,
            "base_model": record.base_model,
            "publish": record.publish,
        }
    )


def get_reclaim_settings(wildcards):
    """Authority is part of the params: granting it later makes a rerun act."""
    return {"authorized": is_authorized(config, "reclaim_authorized", wildcards.job)}
