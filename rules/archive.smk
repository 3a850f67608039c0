# Archive everything informative (pack-rat; never weights or core dumps), verify it, copy it to
# the record's archive destination when one is named (s3://, file:// or hf://datasets/...), and
# verify the remote copy. Every run kind has these steps; its trees follow the kind (get_kind).


rule archive:
    # why its inputs: logs.tar, the trace tarball (kinds with a trace tree),
    # chain/retries/manifests; not the metric surface (a malformed trainer log must not block
    # preservation).
    input:
        unpack(get_archive_inputs),
    output:
        tgz="{job}/archive/{job}_archive.tgz",
        manifest="{job}/archive/MANIFEST",
    log:
        "{job}/logs/archive.log",
    conda:
        RLKEEP_ENV
    resources:
        cpus_per_task=2,
        mem_mb=4000,
        runtime=240,
    params:
        settings=get_archive_settings,
    script:
        "../scripts/steps/archive.py"


rule verify_archive:
    # why its inputs: the archive and its MANIFEST.
    input:
        # ancient: a real archive is over Snakemake's 1 MB checksum limit, so a skewed clock would redo
        # a finished upload by its time alone; a rebuilt archive still reruns this (its MANIFEST changes)
        tgz=ancient("{job}/archive/{job}_archive.tgz"),
        manifest="{job}/archive/MANIFEST",
    output:
        verify="{job}/verify/archive.json",
    log:
        "{job}/logs/verify_archive.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=2000,
        runtime=240,
        net_io=1,
    params:
        settings=get_archive_transfer_settings,
    script:
        "../scripts/steps/verify_archive.py"


# The restore rehearsal: the archive read back from where verify_archive verified it, restored into
# scratch and held to what it was built from; reclamation waits on its sentinel (verify/restore.json).


rule rehearse_restore:
    # why its inputs: verify/archive.json (where the verified copy is) + the archive's own inputs
    # (what it is compared with) + metrics.csv and trials.csv when the kind has them (the run's
    # tools must agree on the restored tree).
    input:
        unpack(get_rehearse_restore_inputs),
    output:
        verify="{job}/verify/restore.json",
    log:
        "{job}/logs/rehearse_restore.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=2000,
        runtime=240,
        net_io=1,
    script:
        "../scripts/steps/rehearse_restore.py"


# On demand, never part of DONE: the run's informative tree restored from its archive into
# <job>/restore/tree/ (`rlkeep restore <job> --from URL` does the same without a data root).


rule restore:
    # why its inputs: verify/archive.json + MANIFEST: on demand only (<job>/restore/DONE), never in
    # DONE.
    input:
        archive="{job}/verify/archive.json",
        manifest="{job}/archive/MANIFEST",
    output:
        done="{job}/restore/DONE",
    log:
        "{job}/logs/restore.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=2000,
        runtime=240,
        net_io=1,
    script:
        "../scripts/steps/restore.py"


# Registration (runbook step 6): only when the record says register.authorized, and only of a
# complete publication: verify/model.json (the card links the verified trace dataset).


rule register:
    # why its inputs: verify/model.json + verify/traces.json: only verified destinations are
    # registered.
    input:
        model="{job}/verify/model.json",
        traces="{job}/verify/traces.json",
    output:
        register="{job}/register.json",
    log:
        "{job}/logs/register.log",
    # on the host when an executor (e.g. SLURM) runs the rest: it needs the host's registry credentials
    localrule: True
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=15,
    params:
        settings=get_register_settings,
    script:
        "../scripts/steps/register.py"


# Reclamation (runbook step 7): its inputs are every verify sentinel of the kind; it acts only with
# `--config reclaim_authorized=<job>` for exactly this job.


rule reclaim:
    # why its inputs: every verify sentinel of the kind (verify/restore.json included) + the sync
    # manifests: delete only what is preserved and was restored in rehearsal.
    input:
        unpack(get_reclaim_inputs),
    output:
        reclaim="{job}/reclaim.json",
    log:
        "{job}/logs/reclaim.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=2000,
        runtime=240,
        net_io=1,
    params:
        settings=get_reclaim_settings,
    script:
        "../scripts/steps/reclaim.py"
