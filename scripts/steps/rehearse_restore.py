"""Rule rehearse_restore (rules/archive.smk): <job>/verify/restore.json: the archive restored from its destination and compared."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
