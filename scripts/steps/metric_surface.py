"""Rule metric_surface (rules/checkpoint.smk): <job>/metrics/: the metric surface across the chain (metrics.csv and its plots)."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
