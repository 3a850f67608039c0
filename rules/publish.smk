# Model publication (runbook step 4) in two phases, so that export and model publication never
# wait on the trace sync while the card links the trace dataset only once it is verified (the
# runbook verifies the traces "before reporting the trace destination to the model-publication
# step"):
#   stage_model, publish_model: the flat model, training_logs/ and a card whose `## Training Traces`
#     link is pending; redact the whole tree, upload additively, download fresh, run every check
#     but the link -> verify/model_upload.json
#   link_model_card: once verify/traces.json exists, link the dataset in one README-only commit,
#     download fresh, run every check -> verify/model.json (docs/contract.md §4)
# Not applicable when the record names no destinations.


rule stage_model:
    # why its inputs: the verified export, selected.json, the surface files and logs.tar for
    # training_logs/, chain.json for the card; no trace artifact.
    input:
        # ancient: export.json holds every exported file's sha256, so a re-export of the same files
        # (model/ brought back after DONE) restages and republishes nothing; a changed export does
        model=ancient("{job}/model"),
        export="{job}/export.json",
        selected="{job}/checkpoint/selected.json",
        metrics="{job}/metrics/metrics.csv",
        superseded="{job}/metrics/superseded.csv",
        eval="{job}/metrics/eval.csv",
        report="{job}/metrics/report.md",
        plot="{job}/metrics/reward.png",
        logs="{job}/sync/logs.tar",
        chain=get_chain_input,
    output:
        stage=directory("{job}/stage/model"),
        redaction="{job}/stage/model.redaction.json",
    log:
        "{job}/logs/stage_model.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=120,
    params:
        settings=get_publish_settings,
    script:
        "../scripts/steps/stage_model.py"


rule publish_model:
    # why its inputs: the staged tree and its redaction report; when the record names a trace
    # dataset, the card's Training Traces link waits on verify/traces.json (runbook: verify the
    # traces before reporting their destination).
    input:
        unpack(get_publish_model_inputs),
    output:
        verify="{job}/verify/model_upload.json",
    log:
        "{job}/logs/publish_model.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=480,
        net_io=1,
    params:
        settings=get_publish_settings,
    script:
        "../scripts/steps/publish_model.py"


# Trace dataset (runbook step 5): rebuilt from the full synced tree, never the monitor sample.


rule stage_traces:
    # why its inputs: trace_jobs.tar + manifest (objects_skipped is inspected before export).
    input:
        tar="{job}/sync/trace_jobs.tar",
        manifest="{job}/sync/trace_jobs.manifest.json",
    output:
        stage=directory("{job}/stage/traces"),
    log:
        "{job}/logs/stage_traces.log",
    conda:
        RLKEEP_ENV
    resources:
        cpus_per_task=2,
        mem_mb=8000,
        runtime=240,
    params:
        settings=get_trace_settings,
    script:
        "../scripts/steps/stage_traces.py"


rule publish_traces:
    # why its inputs: the staged trace tree.
    input:
        unpack(get_publish_traces_inputs),
    output:
        verify="{job}/verify/traces.json",
    log:
        "{job}/logs/publish_traces.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=240,
        net_io=1,
    params:
        settings=get_publish_settings,
    script:
        "../scripts/steps/publish_traces.py"


# After both publications: the card's trace link (the README commit also writes the card it
# committed to <job>/stage/model_card/README.md, next to the staging it completes).


rule link_model_card:
    # why its inputs: the uploaded model (verify/model_upload.json) and its staging; verify/traces.json
    # when the record names publish.traces: the card links only a verified trace dataset.
    input:
        unpack(get_link_model_card_inputs),
    output:
        verify="{job}/verify/model.json",
    log:
        "{job}/logs/link_model_card.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=4000,
        runtime=240,
        net_io=1,
    params:
        settings=get_publish_settings,
    script:
        "../scripts/steps/link_model_card.py"
