"""Rule sync_traces (rules/sync.smk): <job>/sync/trace_jobs.tar and its manifest: the full durable trace tree."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
