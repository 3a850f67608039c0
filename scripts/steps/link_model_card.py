"""Rule link_model_card (rules/publish.smk): <job>/verify/model.json: the card's ## Training Traces link, verified."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
