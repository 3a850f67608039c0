"""Rule export_model (rules/export.smk): <job>/model/ and export.json: the selected checkpoint as a flat, verified model."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
