"""Rule trial_table (rules/checkpoint.smk): <job>/metrics/trials.csv: one row per trial of the trace tree."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
