"""Rule reclaim (rules/archive.smk): <job>/reclaim.json: the run's sources deleted, only under authority after every verification."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
