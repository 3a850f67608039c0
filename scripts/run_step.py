"""Adapter every rule runs: hand the Snakemake job to the rlkeep function named in params.run."""
from rlkeep.steps import run_from_snakemake

run_from_snakemake(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
