"""Rule stop_retries (rules/capture.smk): <job>/retries.json: the chain's pending retries stopped by exact id."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
