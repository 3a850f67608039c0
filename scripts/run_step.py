"""Adapter every rule runs: hand the Snakemake job to the function of its rule's row in
rlkeep/pipeline.py (rlkeep.steps.run_from_snakemake picks it by snakemake.rule)."""
from rlkeep.steps import run_from_snakemake

run_from_snakemake(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
