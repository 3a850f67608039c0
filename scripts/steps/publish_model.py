"""Rule publish_model (rules/publish.smk): <job>/verify/model_upload.json: the staged model uploaded and read back."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
