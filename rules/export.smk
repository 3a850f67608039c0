# Detect the selected checkpoint's format, consolidate it to a flat model and verify it
# (runbook step 3). A training checkpoint is not a publishable model until this passes.


rule export_model:
    # why its inputs: selected.json + candidates.json (the chosen save's files and format).
    input:
        selected="{job}/checkpoint/selected.json",
        candidates="{job}/checkpoint/candidates.json",
    output:
        model=directory("{job}/model"),
        export="{job}/export.json",
    log:
        "{job}/logs/export_model.log",
    conda:
        RLKEEP_ENV
    resources:
        cpus_per_task=2,
        mem_mb=16000,
        runtime=240,
        net_io=1,
    script:
        "../scripts/steps/export_model.py"
