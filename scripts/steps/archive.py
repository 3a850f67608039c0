"""Rule archive (rules/archive.smk): <job>/archive/: the archive of everything informative and its MANIFEST."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.archive.step import archive_step
process.run(archive_step)
