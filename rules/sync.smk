# Sync every attempt's logs and the full durable trace tree: tar, then transfer (runbook step 1).
# Both read the store only after this run's pending retries were stopped.


rule sync_logs:
    # why its inputs: chain.json: attempt slugs, SLURM StdOut paths, each attempt's state for the
    # manifest; retries.json: no retry may still write while its logs are read.
    input:
        chain=get_chain_input,
        retries="{job}/retries.json",
    output:
        tar="{job}/sync/logs.tar",
        manifest="{job}/sync/logs.manifest.json",
    log:
        "{job}/logs/sync_logs.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=120,
        net_io=1,
    params:
        settings=get_sync_settings("logs"),
        record=get_store_settings("logs"),
    script:
        "../scripts/steps/sync_logs.py"


rule sync_traces:
    # why its inputs: retries.json: a pending retry would still write trials. Nothing waits on it
    # but the trace side (trial_table, stage_traces), the archive, reclaim and DONE.
    input:
        retries="{job}/retries.json",
    output:
        tar="{job}/sync/trace_jobs.tar",
        manifest="{job}/sync/trace_jobs.manifest.json",
    log:
        "{job}/logs/sync_traces.log",
    conda:
        RLKEEP_ENV
    resources:
        cpus_per_task=2,
        mem_mb=4000,
        runtime=480,
        net_io=1,
    params:
        settings=get_sync_settings("traces"),
        record=get_store_settings("traces"),
    script:
        "../scripts/steps/sync_traces.py"
