# rlkeep: preserve, publish and reclaim a finished agentic RL run.
#
#     snakemake --profile iris <job>/DONE
#
# The working directory is the data root: records/<job>.yaml in, <job>/... out.
# Every artifact is a file target (docs/contract.md §4); where each one is made:
#   <job>/chain.json, <job>/retries.json ............... rules/capture.smk
#   <job>/sync/{logs,trace_jobs}.tar + .manifest.json .. rules/sync.smk
#   <job>/checkpoint/candidates.json, selected.json .... rules/checkpoint.smk
#   <job>/metrics/metrics.csv, report.md, reward.png ... rules/checkpoint.smk (metric_surface: logs)
#   <job>/metrics/trials.csv, trials.md ............... rules/checkpoint.smk (trial_table: traces)
#   <job>/metrics/vllm.csv, batch_errors.csv, generation.md, vllm.png  rules/generation.smk (logs)
#   <job>/model/, <job>/export.json ................... rules/export.smk
#   <job>/stage/model/, verify/model_upload.json ...... rules/publish.smk (model on the Hub)
#   <job>/verify/model.json ........................... rules/publish.smk (card links verified traces)
#   <job>/stage/traces/, verify/traces.json ........... rules/publish.smk
#   <job>/archive/<job>_archive.tgz, MANIFEST .......... rules/archive.smk
#   <job>/verify/archive.json, register.json, reclaim.json  rules/archive.smk
#   <job>/verify/restore.json, <job>/restore/DONE ...... rules/archive.smk (restore rehearsal, restore)
#   <job>/DONE, <job>/REPORT.md ........................ rules/report.smk
# Shared: records and input functions in rules/common.smk, each step's params in rules/params.smk.
# Not targets: <job>/STATUS.json and campaign/ (index.html, <job>.html, refused.json) are written at
# the end of every invocation by rlkeep/campaign/writer.py (rules/invocation.smk), and by `rlkeep campaign`.
# Each rule names its adapter, scripts/steps/<rule>.py, which runs the function its row in the step
# table (scripts/rlkeep/pipeline.py, column `function`) names, logged to <job>/logs/<rule>.log. The
# row says what reports need of it; its `kinds` (rl | sft | datagen | eval; rlkeep/kinds.py) decide
# which of these a job's DONE needs: get_done_inputs, get_archive_inputs and get_reclaim_inputs in
# rules/common.smk read the table.

from snakemake.utils import min_version

min_version("9.0")

# `--report`: the captions are rendered without the duplicate-target warnings Snakemake's own links
# cause (report/docutils.conf says why); an operator's own DOCUTILSCONFIG wins
os.environ.setdefault(
    "DOCUTILSCONFIG", os.path.join(workflow.basedir, "report", "docutils.conf")
)


configfile: os.path.join(workflow.basedir, "config", "config.yaml")


##### load rules #####


include: "rules/common.smk"
include: "rules/params.smk"
include: "rules/invocation.smk"
include: "rules/capture.smk"
include: "rules/sync.smk"
include: "rules/checkpoint.smk"
include: "rules/generation.smk"
include: "rules/export.smk"
include: "rules/publish.smk"
include: "rules/archive.smk"
include: "rules/report.smk"


##### target rules #####


rule all:
    default_target: True
    input:
        get_all_done_targets,
    # on the host when an executor (e.g. SLURM) runs the rest: a trivial step
    localrule: True
