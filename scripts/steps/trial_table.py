"""Rule trial_table (rules/checkpoint.smk): <job>/metrics/trials.csv: one row per trial of the trace tree."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.metrics.step import trial_table_step
process.run(trial_table_step)
