"""Rule stage_model (rules/publish.smk): <job>/stage/model: the model, training_logs/ and card, redacted."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.hub.steps import stage_model_step
process.run(stage_model_step)
