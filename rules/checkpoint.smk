# The metric surface across the chain (trainer logs only), then a checkpoint chosen only by the
# campaign's rule (runbook step 2). Listing reads the mutable checkpoint folders: only after
# retries.json, and never while chain.json lists an unrecorded attempt of the run that is pending
# or running.


rule list_checkpoints:
    # why its inputs: retries.json: checkpoint folders are mutable until the retries are stopped.
    input:
        retries="{job}/retries.json",
        chain=get_chain_input,
    output:
        candidates="{job}/checkpoint/candidates.json",
    log:
        "{job}/logs/list_checkpoints.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=30,
        net_io=1,
    params:
        record=get_store_settings("ckpts", "exports"),
    script:
        "../scripts/steps/list_checkpoints.py"


rule metric_surface:
    # why its inputs: logs.tar (trainer logs) + logs.manifest.json (attempt states of dead attempts)
    # + candidates.json (marked in report.md and reward.png). Never the trace tarball.
    input:
        logs="{job}/sync/logs.tar",
        logs_manifest="{job}/sync/logs.manifest.json",
        candidates="{job}/checkpoint/candidates.json",
    output:
        metrics=report(
            "{job}/metrics/metrics.csv",
            caption="../report/metrics_csv.rst",
            category="Metrics",
            subcategory="{job}",
        ),
        superseded="{job}/metrics/superseded.csv",
        eval="{job}/metrics/eval.csv",
        attempts="{job}/metrics/attempts.json",
        report=report(
            "{job}/metrics/report.md",
            caption="../report/metrics_md.rst",
            category="Metrics",
            subcategory="{job}",
        ),
        plot=report(
            "{job}/metrics/reward.png",
            caption="../report/reward.rst",
            category="Metrics",
            subcategory="{job}",
        ),
    log:
        "{job}/logs/metric_surface.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/steps/metric_surface.py"


# Per-trial rows from the trace tarball, apart from the surface: selection and export never wait
# on the trace sync.


rule trial_table:
    # why its inputs: trace_jobs.tar only: trials.csv and trials.md, off the model path.
    input:
        traces="{job}/sync/trace_jobs.tar",
    output:
        trials=report(
            "{job}/metrics/trials.csv",
            caption="../report/trials_csv.rst",
            category="Trials",
            subcategory="{job}",
        ),
        report=report(
            "{job}/metrics/trials.md",
            caption="../report/trials_md.rst",
            category="Trials",
            subcategory="{job}",
        ),
    log:
        "{job}/logs/trial_table.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=120,
    script:
        "../scripts/steps/trial_table.py"


rule select_checkpoint:
    # why its inputs: candidates.json (complete saves only) + metrics.csv (the rule's metric).
    input:
        candidates="{job}/checkpoint/candidates.json",
        metrics="{job}/metrics/metrics.csv",
    output:
        selected="{job}/checkpoint/selected.json",
    log:
        "{job}/logs/select_checkpoint.log",
    # on the host when an executor (e.g. SLURM) runs the rest: a trivial step
    localrule: True
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=15,
    params:
        settings=get_selection_settings,
    script:
        "../scripts/steps/select_checkpoint.py"
