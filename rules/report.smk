# The completion record (docs/contract.md §5). STATUS.json is no rule's output: it is
# written at the end of every invocation (rules/invocation.smk, rlkeep/campaign/writer.py), so it exists
# even when a step is blocked.


rule done:
    # why its inputs: every step's evidence (rlkeep.pipeline.STEPS): DONE is the proof that all
    # passed; STATUS.json (written at the end of every invocation) is the record when something is
    # blocked.
    input:
        unpack(get_done_inputs),
    output:
        done="{job}/DONE",
        report=report(
            "{job}/REPORT.md",
            caption="../report/done.rst",
            category="Completion record",
            subcategory="{job}",
        ),
    log:
        "{job}/logs/done.log",
    # on the host when an executor (e.g. SLURM) runs the rest: a trivial step
    localrule: True
    conda:
        RLKEEP_ENV
    resources:
        mem_mb=1000,
        runtime=15,
    params:
        settings=get_record_digest,
    script:
        "../scripts/steps/done.py"
