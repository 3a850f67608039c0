"""Rule sync_logs (rules/sync.smk): <job>/sync/logs.tar and its manifest: every attempt's logs."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
