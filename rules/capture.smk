# Capture the attempt chain, then stop only this run's exact pending retries (runbook step 1),
# before anything reads mutable checkpoint folders.


rule capture_chain:
    output:
        chain="{job}/chain.json",
    log:
        "{job}/logs/capture_chain.log",
    conda:
        RLKEEP_ENV
    params:
        settings=get_chain_settings,
    script:
        RUN_STEP


rule stop_retries:
    input:
        chain="{job}/chain.json",
    output:
        retries="{job}/retries.json",
    log:
        "{job}/logs/stop_retries.log",
    conda:
        RLKEEP_ENV
    script:
        RUN_STEP
