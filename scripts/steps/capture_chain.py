"""Rule capture_chain (rules/capture.smk): <job>/chain.json: every attempt of the chain and its scheduler state."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
