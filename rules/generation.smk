# vLLM utilisation and batch errors from the raw trainer lines in logs.tar (rlkeep/generation_stats/):
# report material the metric surface does not carry. Off the model path: nothing but DONE waits on
# it, and it reads logs.tar only, so selection and export never wait on it.


rule generation_stats:
    # why its inputs: logs.tar only: vLLM utilisation and batch errors for the report, off the model
    # path.
    input:
        logs="{job}/sync/logs.tar",
    output:
        vllm="{job}/metrics/vllm.csv",
        batch_errors="{job}/metrics/batch_errors.csv",
        report=report(
            "{job}/metrics/generation.md",
            caption="../report/generation_md.rst",
            category="Metrics",
            subcategory="{job}",
        ),
        plot=report(
            "{job}/metrics/vllm.png",
            caption="../report/vllm.rst",
            category="Metrics",
            subcategory="{job}",
        ),
    log:
        "{job}/logs/generation_stats.log",
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=2000,
        runtime=60,
    script:
        "../scripts/steps/generation_stats.py"
