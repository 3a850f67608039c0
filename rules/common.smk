# Shared by every stage: config validation, wildcard constraints, record access, get_* helpers.
# What one invocation plans, says and leaves behind apart from the rules: rules/invocation.smk.

import hashlib
import re
import sys
from functools import lru_cache
from pathlib import Path

from snakemake.utils import validate

from rlkeep.chain_recapture import captured_for
from rlkeep.errors import RecordError
from rlkeep.pipeline import archive_inputs, evidence_of, kind_has, verify_sentinels
from rlkeep.records import load_record, record_path

##### why each edge exists #####
# An input is declared only where a step reads what another step writes, or where the runbook
# orders two steps (so a failure blocks only what truly depends on it; the profile keeps going).
# Each rule says why it takes each of its inputs in a comment at its top. rlkeep.pipeline's `after`
# column restates these edges for STATUS.json's causes; an edge added or removed in a rule fails
# tests/test_step_graph.py until the column says the same.


##### config #####

validate(config, "../scripts/rlkeep/schemas/config.schema.yaml")

RECORDS_DIR = Path(config["records"])
# the working directory when the Snakefile is read (--directory applied); Snakemake leaves it before exit
DATA_ROOT = Path.cwd()
# every rule runs in the one pinned environment (`--sdm conda` builds it; without it, the .venv)
RLKEEP_ENV = "../envs/rlkeep.yaml"


JOB_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


wildcard_constraints:
    job=JOB_PATTERN.pattern,


# Sizes: each rule's `resources:` say what it needs on a cluster (mem_mb, runtime in minutes, and
# cpus_per_task where a step uses two CPUs: the SLURM plugin asks for them). No rule declares
# `threads:`: no step reads a thread count, and two of a 2-core machine's cores held by one step
# kept the network-bound steps of a local run from overlapping.


##### records #####


@lru_cache(maxsize=None)
def load_job_record(job):
    """The job's validated record, or the RecordError that refuses it (each record alone)."""
    try:
        return load_record(record_path(RECORDS_DIR, job))
    except RecordError as error:
        return error


def get_record(job):
    """The validated record of a job. The campaign target never plans a refused record's job;
    naming one of its files as a target stops planning with the record's message alone.
    """
    record = load_job_record(job)
    if isinstance(record, RecordError):
        # Snakemake wraps an Exception from an input function in an InputFunctionException that
        # prints the function's frames; SystemExit is no Exception, so the message stands alone.
        print(f"rlkeep: {record}", file=sys.stderr)
        raise SystemExit(1)
    return record


def get_all_jobs():
    """Every job with a record file in records/ (the file stem) that can be a target: a stem that is
    no job name is never one (its record is refused, rlkeep.records: 'job' must equal the stem).
    """
    stems = [Path(path).stem for path in get_record_files()]
    return [stem for stem in stems if JOB_PATTERN.fullmatch(stem)]


def get_records_dir(wildcards):
    """The records folder as configured (a function, so the linter sees no hard-coded input prefix)."""
    return str(RECORDS_DIR)


def get_record_files():
    """Every records/*.yaml, good or refused (the campaign view shows both)."""
    if not RECORDS_DIR.is_dir():
        return []
    return [
        str(path)
        for path in sorted(RECORDS_DIR.glob("*.yaml"), key=lambda path: path.stem)
    ]


def get_record_sha256(job):
    return hashlib.sha256(record_path(RECORDS_DIR, job).read_bytes()).hexdigest()


def get_chain_input(wildcards):
    """chain.json for the steps that read it. While it was captured for the record's chain as it is,
    it is ancient: capturing it again (not final, or chain_excludes edited) reruns only the steps
    it held back, the archive (which keeps chain.json: get_archive_inputs) and DONE. Once `chain:`,
    scheduler or cluster changed, it is a plain input, so stop_retries and the syncs run again for
    the new chain (rlkeep.chain_recapture).
    """
    record = get_record(wildcards.job)
    path = f"{wildcards.job}/chain.json"
    if captured_for(
        Path(wildcards.job), list(record.chain), record.scheduler, record.cluster
    ):
        return ancient(path)
    return path


##### inputs that depend on what the record asks for #####


# A staged tree is a directory: Snakemake cannot compare its checksum, only its time. A machine whose
# clock runs ahead (a SLURM node, a login node) dates it after the verify sentinel of a finished
# upload, and the upload would run again. Its time is ignored (ancient); a staging step that runs in
# the same invocation still reruns what consumes it (tests/reliability/test_load_faults.py).


def get_publish_model_inputs(wildcards):
    """Publishing needs the staged tree only when the record names destinations; never the traces
    (the staged card's trace link is pending until link_model_card)."""
    if get_record(wildcards.job).publish is None:
        return {"chain": get_chain_input(wildcards)}
    return {
        "stage": ancient(f"{wildcards.job}/stage/model"),
        "redaction": f"{wildcards.job}/stage/model.redaction.json",
    }


def get_link_model_card_inputs(wildcards):
    """The uploaded model (verify/model_upload.json) and its staging, plus verify/traces.json when
    the record names publish.traces: the runbook verifies the trace dataset before reporting its
    destination to the model publication, so the card's link waits for it (nothing else does).
    """
    job = wildcards.job
    publish = get_record(job).publish
    inputs = {"upload": f"{job}/verify/model_upload.json"}
    if publish is None:
        return inputs
    inputs["stage"] = ancient(f"{job}/stage/model")
    if publish.get("traces"):
        inputs["traces"] = f"{job}/verify/traces.json"
    return inputs


def get_publish_traces_inputs(wildcards):
    """The staged dataset; ancient only once its upload was verified (a skewed clock must not redo
    it). Before that it is a plain input: Snakemake 9.27 never plans a job whose only inputs from a
    job that must run again are ancient and present, even when its own output is missing (dag.py
    update_needrun masks it), so a staging interrupted after it wrote its tree would plan neither
    the upload nor DONE, and the command would end 0 without DONE (tests/test_pipeline.py).
    """
    job = wildcards.job
    if get_record(job).publish is None:
        return {"chain": get_chain_input(wildcards)}
    stage = f"{job}/stage/traces"
    return {
        "stage": (
            ancient(stage) if Path(job, "verify", "traces.json").exists() else stage
        )
    }


##### inputs that depend on the run's kind (rlkeep.kinds: the runbook's per-run-type maps) #####


def get_kind(job):
    """The component map of the job's kind: which steps apply, its trace tree, its archive trees."""
    return get_record(job).spec


def get_archive_inputs(wildcards):
    """The `archived` outputs of the steps the kind has (rlkeep.pipeline): logs always, the synced
    trace tree for kinds that have one. chain.json is a plain input, never ancient: the archive keeps
    the chain.json DONE describes, so a capture asked again (it was not final) builds it again (its
    restore rehearsal compares them)."""
    return archive_inputs(wildcards.job, get_kind(wildcards.job).name)


def get_rehearse_restore_inputs(wildcards):
    """Where the verified archive is, what it was built from, and the tables the restored tree must give."""
    job = wildcards.job
    kind = get_kind(job)
    compared = dict(get_archive_inputs(wildcards))
    if kind_has(kind.name, "metric_surface"):
        compared["metrics"] = f"{job}/metrics/metrics.csv"
    if kind_has(kind.name, "trial_table"):
        compared["trials"] = f"{job}/metrics/trials.csv"
    # What the restored tree is compared with is ancient: its time says nothing (a sync tarball over
    # Snakemake's 1 MB checksum limit, dated ahead by a skewed clock, would redo a finished rehearsal);
    # a step that rewrites one still reruns the rehearsal, and the archive built from it changes.
    return {
        "archive": f"{job}/verify/archive.json",
        "manifest": f"{job}/archive/MANIFEST",
        **{name: ancient(path) for name, path in compared.items()},
    }


def get_reclaim_inputs(wildcards):
    """Every verify sentinel of the kind (reclamation waits for all of them) and the sync manifests."""
    job = wildcards.job
    kind = get_kind(job)
    inputs = {name: f"{job}/verify/{name}.json" for name in verify_sentinels(kind.name)}
    inputs["logs_manifest"] = f"{job}/sync/logs.manifest.json"
    inputs["archive_manifest"] = (
        f"{job}/archive/MANIFEST"  # reclaim.json says where each deleted object is kept
    )
    if kind.trace_tree is not None:
        inputs["traces_manifest"] = f"{job}/sync/trace_jobs.manifest.json"
    return inputs


##### inputs of the completion record #####


def get_done_inputs(wildcards):
    """The evidence file of every step the job's kind has (rlkeep.pipeline.STEPS is the one list of
    steps); DONE reports the others as not_applicable, so their rules never enter the DAG.
    """
    return get_done_evidence(wildcards.job)


def get_done_evidence(job):
    return evidence_of(job, get_kind(job).name)
