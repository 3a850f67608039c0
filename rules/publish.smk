# Model publication (runbook step 4): stage the flat model with training_logs/ and a model card
# whose `## Training Traces` links the trace dataset, redact the whole tree, upload additively,
# download fresh, check again. Not applicable when the record names no destinations.


rule stage_model:
    input:
        model="{job}/model",
        export="{job}/export.json",
        selected="{job}/checkpoint/selected.json",
        metrics="{job}/metrics/metrics.csv",
        superseded="{job}/metrics/superseded.csv",
        eval="{job}/metrics/eval.csv",
        trials="{job}/metrics/trials.csv",
        report="{job}/metrics/report.md",
        plot="{job}/metrics/reward.png",
        logs="{job}/sync/logs.tar",
        chain="{job}/chain.json",
    output:
        stage=directory("{job}/stage/model"),
        redaction="{job}/stage/model.redaction.json",
    log:
        "{job}/logs/stage_model.log",
    params:
        run="rlkeep.hub:stage_model_step",
        settings=get_publish_settings,
    script:
        RUN_STEP


rule publish_model:
    input:
        unpack(get_publish_model_inputs),
    output:
        verify="{job}/verify/model.json",
    log:
        "{job}/logs/publish_model.log",
    resources:
        net_io=1,
    params:
        run="rlkeep.hub:publish_model_step",
        settings=get_publish_settings,
    script:
        RUN_STEP


# Trace dataset (runbook step 5): rebuilt from the full synced tree, never the monitor sample.


rule stage_traces:
    input:
        tar="{job}/sync/trace_jobs.tar",
        manifest="{job}/sync/trace_jobs.manifest.json",
    output:
        stage=directory("{job}/stage/traces"),
    log:
        "{job}/logs/stage_traces.log",
    params:
        run="rlkeep.traces:stage_traces_step",
        settings=get_trace_settings,
    script:
        RUN_STEP


rule publish_traces:
    input:
        unpack(get_publish_traces_inputs),
    output:
        verify="{job}/verify/traces.json",
    log:
        "{job}/logs/publish_traces.log",
    resources:
        net_io=1,
    params:
        run="rlkeep.hub:publish_traces_step",
        settings=get_publish_settings,
    script:
        RUN_STEP
