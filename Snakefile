# rlkeep: preserve, publish and reclaim a finished agentic RL run.
#
#     snakemake --profile iris <job>/DONE
#
# The working directory is the data root: records/<job>.yaml in, <job>/... out.
# Every artifact is a file target (docs/contract.md §4). Each one, the rules file that makes it and
# its rule (tests/test_pipeline_table.py checks this list against the rules' outputs):
#   <job>/chain.json                     rules/capture.smk     capture_chain
#   <job>/retries.json                   rules/capture.smk     stop_retries
#   <job>/sync/logs.tar                  rules/sync.smk        sync_logs
#   <job>/sync/logs.manifest.json        rules/sync.smk        sync_logs
#   <job>/sync/trace_jobs.tar            rules/sync.smk        sync_traces
#   <job>/sync/trace_jobs.manifest.json  rules/sync.smk        sync_traces
#   <job>/checkpoint/candidates.json     rules/checkpoint.smk  list_checkpoints
#   <job>/metrics/metrics.csv            rules/checkpoint.smk  metric_surface
#   <job>/metrics/superseded.csv         rules/checkpoint.smk  metric_surface
#   <job>/metrics/eval.csv               rules/checkpoint.smk  metric_surface
#   <job>/metrics/attempts.json          rules/checkpoint.smk  metric_surface
#   <job>/metrics/report.md              rules/checkpoint.smk  metric_surface
#   <job>/metrics/reward.png             rules/checkpoint.smk  metric_surface
#   <job>/metrics/trials.csv             rules/checkpoint.smk  trial_table
#   <job>/metrics/trials.md              rules/checkpoint.smk  trial_table
#   <job>/checkpoint/selected.json       rules/checkpoint.smk  select_checkpoint
#   <job>/metrics/vllm.csv               rules/generation.smk  generation_stats
#   <job>/metrics/batch_errors.csv       rules/generation.smk  generation_stats
#   <job>/metrics/generation.md          rules/generation.smk  generation_stats
#   <job>/metrics/vllm.png               rules/generation.smk  generation_stats
#   <job>/model/                         rules/export.smk      export_model
#   <job>/export.json                    rules/export.smk      export_model
#   <job>/stage/model/                   rules/publish.smk     stage_model
#   <job>/stage/model.redaction.json     rules/publish.smk     stage_model
#   <job>/verify/model_upload.json       rules/publish.smk     publish_model
#   <job>/stage/traces/                  rules/publish.smk     stage_traces
#   <job>/verify/traces.json             rules/publish.smk     publish_traces
#   <job>/verify/model.json              rules/publish.smk     link_model_card
#   <job>/archive/<job>_archive.tgz      rules/archive.smk     archive
#   <job>/archive/MANIFEST               rules/archive.smk     archive
#   <job>/verify/archive.json            rules/archive.smk     verify_archive
#   <job>/verify/restore.json            rules/archive.smk     rehearse_restore
#   <job>/restore/DONE                   rules/archive.smk     restore
#   <job>/register.json                  rules/archive.smk     register
#   <job>/reclaim.json                   rules/archive.smk     reclaim
#   <job>/DONE                           rules/report.smk      done
#   <job>/REPORT.md                      rules/report.smk      done
# <job>/restore/DONE is made on demand (docs/restore.md), not for DONE.
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
