"""Rule metric_surface (rules/checkpoint.smk): <job>/metrics/: the metric surface across the chain (metrics.csv and its plots)."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.metrics.step import metric_surface_step
process.run(metric_surface_step)
