# Archive everything informative (pack-rat; never weights or core dumps), verify it, copy it to
# the record's archive destination when one is named, and verify the remote copy.


rule archive:
    input:
        logs="{job}/sync/logs.tar",
        traces="{job}/sync/trace_jobs.tar",
        logs_manifest="{job}/sync/logs.manifest.json",
        traces_manifest="{job}/sync/trace_jobs.manifest.json",
        chain="{job}/chain.json",
        retries="{job}/retries.json",
    output:
        tgz="{job}/archive/{job}_archive.tgz",
        manifest="{job}/archive/MANIFEST",
    log:
        "{job}/logs/archive.log",
    params:
        run="rlkeep.archive:archive_step",
        settings=get_archive_settings,
    script:
        RUN_STEP


rule verify_archive:
    input:
        tgz="{job}/archive/{job}_archive.tgz",
        manifest="{job}/archive/MANIFEST",
    output:
        verify="{job}/verify/archive.json",
    log:
        "{job}/logs/verify_archive.log",
    resources:
        net_io=1,
    params:
        run="rlkeep.archive:verify_archive_step",
        settings=get_archive_settings,
    script:
        RUN_STEP


# Registration (runbook step 6): only when the record says register.authorized.


rule register:
    input:
        model="{job}/verify/model.json",
        traces="{job}/verify/traces.json",
    output:
        register="{job}/register.json",
    log:
        "{job}/logs/register.log",
    params:
        run="rlkeep.registry:register_step",
        settings=get_register_settings,
    script:
        RUN_STEP


# Reclamation (runbook step 7): its inputs are every verify sentinel; it acts only with
# `--config reclaim_authorized=<job>` for exactly this job.


rule reclaim:
    input:
        model="{job}/verify/model.json",
        traces="{job}/verify/traces.json",
        archive="{job}/verify/archive.json",
        logs_manifest="{job}/sync/logs.manifest.json",
        traces_manifest="{job}/sync/trace_jobs.manifest.json",
    output:
        reclaim="{job}/reclaim.json",
    log:
        "{job}/logs/reclaim.log",
    resources:
        net_io=1,
    params:
        run="rlkeep.reclaim:reclaim_step",
        settings=get_reclaim_settings,
    script:
        RUN_STEP
