"""Rule link_model_card (rules/publish.smk): <job>/verify/model.json: the card's ## Training Traces link, verified."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.hub.steps import link_model_card_step
process.run(link_model_card_step)
