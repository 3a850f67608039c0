"""Rule verify_archive (rules/archive.smk): <job>/verify/archive.json: the archive copied to its destination and verified."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.archive.step import verify_archive_step
process.run(verify_archive_step)
