"""`rlkeep traces-dataset`: build the trace dataset from a trace tree or tar, then stage it in a
folder (--stage-only) or replace the Hub dataset's shards in one commit and verify them."""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hub import REPO_ID_RE, replace_trace_shards, verify_trace_publication
from rlkeep.jsonio import dumps
from rlkeep.traces.build import build_trace_dataset
from rlkeep.hub.client import resolve_target
from rlkeep.traces.card import CardInfo
from rlkeep.traces.coverage import DEFAULT_MIN_COVERAGE
from rlkeep.traces.export import EPISODES, FILTERS
from rlkeep.traces.shards import DEFAULT_TRIALS_PER_SHARD
from rlkeep.traces.stage import MANIFEST_NAME, foreign_files


def _coverage_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1]: {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlkeep traces-dataset",
        description="Rebuild the trace dataset from a trace tree (or the sync step's tar), gate it "
                    "on result coverage, and stage it locally or replace the Hub dataset's shards "
                    "in one commit.")
    parser.add_argument("--job-dir", required=True, type=Path,
                        help="extracted trace root (trial folders directly inside) or trace_jobs.tar")
    parser.add_argument("--repo-id", required=True, help="Hub dataset ORG/NAME")
    parser.add_argument("--episodes", choices=EPISODES, default="last")
    parser.add_argument("--filter", choices=FILTERS, default="none",
                        help="success: reward > 0; failure: the rest (default: none)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--single-commit", action="store_true",
                      help="stage in a temp dir, then replace the remote shard set in one commit "
                           "and verify it (the default when --stage-only is not given)")
    mode.add_argument("--stage-only", type=Path, metavar="DIR",
                      help="write the staged tree to DIR and stop; nothing goes to the Hub")
    parser.add_argument("--min-coverage", type=_coverage_arg, default=DEFAULT_MIN_COVERAGE)
    parser.add_argument("--source-sha256", help="expected sha256 of the tar (from the sync manifest)")
    parser.add_argument("--trials-per-shard", type=int, default=DEFAULT_TRIALS_PER_SHARD)
    parser.add_argument("--sharegpt", action="store_true",
                        help="add the conversations_sharegpt column (from: system/human/gpt, value)")
    parser.add_argument("--clean-terminal-noise", action="store_true",
                        help="strip ANSI codes, paste markers and carriage-return overwrites (off by default: "
                             "rows keep the text the model saw); recorded in the manifest and the card")
    parser.add_argument("--job", help="the run's job name, for the dataset card")
    parser.add_argument("--model-repo", help="the policy's Hub model repo ORG/NAME, linked from the dataset card")
    visibility = parser.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True,
                            help="create the dataset private if it does not exist (default)")
    visibility.add_argument("--public", dest="private", action="store_false")
    return parser


def _summary(manifest: dict[str, Any]) -> dict[str, Any]:
    keys = ("result_count", "row_count", "result_coverage", "malformed", "redactions", "episodes", "filter",
            "text_changes")
    return {key: manifest[key] for key in keys} | {"shards": [shard["name"] for shard in manifest["shards"]]}


def _publish(stage: Path, repo_id: str, *, private: bool, manifest: dict[str, Any]) -> dict[str, Any]:
    publication = replace_trace_shards(
        stage, repo_id, private=private, endpoint=None, token=None,
        commit_message=f"Replace trace export with {manifest['row_count']} rows")
    verification = verify_trace_publication(stage, repo_id, publication["commit"])
    return {"publication": publication, "verification": verification}


def cli_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not REPO_ID_RE.match(args.repo_id):
        raise RlkeepError(f"--repo-id must be ORG/NAME, not {args.repo_id!r}")
    if args.trials_per_shard < 1:
        raise RlkeepError("--trials-per-shard must be at least 1")
    if args.model_repo is not None and not REPO_ID_RE.match(args.model_repo):
        raise RlkeepError(f"--model-repo must be ORG/NAME, not {args.model_repo!r}")
    options = dict(episodes=args.episodes, filter=args.filter, min_coverage=args.min_coverage,
                   trials_per_shard=args.trials_per_shard, source_sha256=args.source_sha256,
                   clean_terminal_noise=args.clean_terminal_noise, sharegpt=args.sharegpt,
                   card=CardInfo(job=args.job, dataset_repo=args.repo_id, model_repo=args.model_repo,
                                 endpoint=resolve_target().endpoint))
    if args.stage_only is not None:
        manifest = build_trace_dataset(args.job_dir, args.stage_only, **options)
        kept = foreign_files(args.stage_only)
        if kept:
            print(f"rlkeep: kept {len(kept)} file(s) in {args.stage_only} that this export did not write: "
                  f"{', '.join(kept[:10])}{' ...' if len(kept) > 10 else ''}", file=sys.stderr)
        print(dumps({"status": "staged", "stage": str(args.stage_only), "repo_id": args.repo_id,
                     **_summary(manifest), "kept_files": kept}), end="")
        return 0
    stage_root = Path(tempfile.mkdtemp(prefix="rlkeep-traces-"))
    stage = stage_root / "traces"
    verified = False
    try:
        manifest = build_trace_dataset(args.job_dir, stage, **options)
        outcome = _publish(stage, args.repo_id, private=args.private, manifest=manifest)
        verified = True
    except RlkeepError as error:
        if (stage / MANIFEST_NAME).is_file():
            raise RlkeepError(f"{error} (staged export kept at {stage})") from error
        raise
    finally:
        # Staging is kept until the remote copy verified, so a failed publication can be inspected.
        if verified or not (stage / MANIFEST_NAME).is_file():
            shutil.rmtree(stage_root, ignore_errors=True)
    print(dumps({"status": "published", "repo_id": args.repo_id, **_summary(manifest), **outcome}), end="")
    return 0
