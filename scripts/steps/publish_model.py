"""Rule publish_model (rules/publish.smk): <job>/verify/model_upload.json: the staged model uploaded and read back."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.hub.steps import publish_model_step
process.run(publish_model_step)
