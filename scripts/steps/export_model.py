"""Rule export_model (rules/export.smk): <job>/model/ and export.json: the selected checkpoint as a flat, verified model."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.export.step import export_step
process.run(export_step)
