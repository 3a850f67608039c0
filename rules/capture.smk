# Capture the attempt chain, then stop only this run's exact pending retries (runbook step 1),
# before anything reads mutable checkpoint folders. A capture that is not final (an attempt still
# running, a look-alike still pending or running) is captured again by the next invocation through
# its params (rlkeep.chain_recapture); its readers take it as ancient() while `chain:` is unchanged
# (get_chain_input), so only the steps it held back and DONE read the new answer.


rule capture_chain:
    # why its inputs: record only: the chain is read first (runbook step 1).
    output:
        chain="{job}/chain.json",
    log:
        "{job}/logs/capture_chain.log",
    # on the host when an executor (e.g. SLURM) runs the rest: it needs the host's iris CLI
    localrule: True
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=15,
    params:
        settings=get_chain_settings,
    script:
        "../scripts/steps/capture_chain.py"


rule stop_retries:
    # why its inputs: chain.json: only exact pending retries of the captured chain are stopped.
    input:
        chain=get_chain_input,
    output:
        retries="{job}/retries.json",
    log:
        "{job}/logs/stop_retries.log",
    # on the host when an executor (e.g. SLURM) runs the rest: it needs the host's iris CLI
    localrule: True
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=15,
    script:
        "../scripts/steps/stop_retries.py"
