"""Rule restore (rules/archive.smk): <job>/restore/DONE: the archive restored into <job>/restore/tree/ (on demand)."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
