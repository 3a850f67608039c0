"""Rule list_checkpoints (rules/checkpoint.smk): <job>/checkpoint/candidates.json: the valid checkpoints of the chain."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
