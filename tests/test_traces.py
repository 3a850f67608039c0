"""Trace dataset export (rlkeep.traces): real Harbor trial folders and tars, real parquet files."""
from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlkeep import cli
from rlkeep.errors import RlkeepError
from rlkeep.redaction import Redactor
from rlkeep.traces import (
    COLUMNS, MANIFEST_NAME, REJECTED_MANIFEST_NAME, CoverageError, build_trace_dataset, clean_text,
    cli_main, coverage_message, iter_trials, safe_extract,
)
from tests.support.harbor import (
    OUTCOMES, plan_trials, tar_tree, trial_files, write_files, write_trace_tar, write_trace_tree,
    write_trial, write_unsafe_tar,
)
from tests.support.hub import hub_server, hub_env

__all__ = ["hub_server"]  # fixture used below


class NoRedaction:
    """Shows what would reach the parquet without redaction (the planted-secret test's control)."""

    def redact_text(self, text: str) -> tuple[str, list[tuple[int, str]]]:
        return text, []


def build(source: Path, out: Path, **options):
    options.setdefault("redactor", Redactor())
    return build_trace_dataset(source, out, **options)


def rows(out: Path) -> list[dict]:
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    found = []
    for shard in manifest["shards"]:
        found += pq.read_table(out / "data" / shard["name"]).to_pylist()
    return found


def shard_names(count: int) -> list[str]:
    return [f"train-{i:05d}-of-{count:05d}.parquet" for i in range(count)]


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((out / "data").iterdir())}


def fake_hf_token() -> str:
    # Built from pieces so no credential-shaped literal sits in the sources.
    return "hf" + "_" + "Q7mZ" * 8 + "x9"


@pytest.fixture
def mixed_tree(tmp_path: Path) -> tuple[Path, list]:
    root = tmp_path / "trace_jobs"
    summaries = write_trace_tree(root, 24, seed=7, steps=(2, 5),
                                 outcomes={"success": 3, "partial": 1, "failure": 3, "exception": 1})
    return root, summaries


# ----------------------------------------------------------------------------- determinism

def test_same_input_gives_same_shard_bytes_from_dir_copy_and_tar(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    copy = tmp_path / "elsewhere" / "extracted"
    shutil.copytree(root, copy)
    tar_path = tmp_path / "trace_jobs.tar"
    tar_tree(root, tar_path)

    first = build(root, tmp_path / "a", trials_per_shard=5)
    second = build(root, tmp_path / "b", trials_per_shard=5)
    from_copy = build(copy, tmp_path / "c", trials_per_shard=5)
    from_tar = build(tar_path, tmp_path / "d", trials_per_shard=5)

    assert len(first["shards"]) == 5  # 24 trials, 5 per shard
    reference = shard_bytes(tmp_path / "a")
    assert list(reference) == shard_names(5)
    for out in ("b", "c", "d"):
        assert shard_bytes(tmp_path / out) == reference
    assert first["shards"] == second["shards"] == from_copy["shards"] == from_tar["shards"]
    assert (tmp_path / "a" / MANIFEST_NAME).read_bytes() == (tmp_path / "b" / MANIFEST_NAME).read_bytes()
    assert from_tar["source"]["kind"] == "tar" and len(from_tar["source"]["sha256"]) == 64
    text = (tmp_path / "a" / MANIFEST_NAME).read_text()
    assert text.endswith("}\n") and json.loads(text) == first
    assert text == json.dumps(first, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_unsorted_tar_is_extracted_and_gives_the_same_bytes(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    shuffled = tmp_path / "shuffled.tar"
    files = sorted((p for p in root.rglob("*") if p.is_file()), reverse=True)
    with tarfile.open(shuffled, "w") as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(root).as_posix())
    build(root, tmp_path / "from-dir")
    build(shuffled, tmp_path / "from-shuffled")
    assert shard_bytes(tmp_path / "from-shuffled") == shard_bytes(tmp_path / "from-dir")


def test_gzipped_tar_gives_the_same_bytes(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    gz = tmp_path / "trace_jobs.tar.gz"
    with tarfile.open(gz, "w:gz") as tar:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(root).as_posix())
    build(root, tmp_path / "from-dir")
    manifest = build(gz, tmp_path / "from-gz")
    assert shard_bytes(tmp_path / "from-gz") == shard_bytes(tmp_path / "from-dir")
    assert manifest["source"]["name"] == "trace_jobs.tar.gz"


def test_tar_builder_matches_the_tree_builder(tmp_path: Path) -> None:
    tree_summaries = write_trace_tree(tmp_path / "tree", 6, seed=21)
    tar_summaries = write_trace_tar(tmp_path / "direct.tar", 6, seed=21)
    assert tar_summaries == tree_summaries
    build(tmp_path / "tree", tmp_path / "from-tree")
    build(tmp_path / "direct.tar", tmp_path / "from-tar")
    assert shard_bytes(tmp_path / "from-tar") == shard_bytes(tmp_path / "from-tree")


def test_trial_builder_is_deterministic() -> None:
    first = trial_files("codecontests-9__ZZZZZZZ", seed=5, n_steps=3, continuation_after=1, cast=True)
    again = trial_files("codecontests-9__ZZZZZZZ", seed=5, n_steps=3, continuation_after=1, cast=True)
    other = trial_files("codecontests-9__ZZZZZZZ", seed=6, n_steps=3, continuation_after=1, cast=True)
    assert first == again and first != other
    assert {"result.json", "config.json", "trial.log", "agent/trajectory.json", "agent/trajectory.cont-1.json",
            "agent/terminus_2.pane", "agent/recording.cast", "verifier/reward.txt",
            "verifier/test-stdout.txt"} <= set(first)
    for outcome in OUTCOMES:
        files = trial_files("t__AAAAAAA", seed=1, outcome=outcome, n_steps=2)
        assert ("result.json" in files) == (outcome != "incomplete")
        assert ("agent/trajectory.json" in files) == (outcome != "setup_error")
        if outcome in ("exception", "setup_error"):
            result = json.loads(files["result.json"])
            assert result["verifier_result"] is None and result["exception_info"]["exception_type"]


def test_row_group_flushes_do_not_change_the_rows(mixed_tree, tmp_path: Path, monkeypatch) -> None:
    from rlkeep.traces import shards

    root, _ = mixed_tree
    build(root, tmp_path / "big-groups", episodes="all")
    monkeypatch.setattr(shards, "ROW_GROUP_CHARS", 20_000)
    build(root, tmp_path / "small-groups", episodes="all")
    small = pq.ParquetFile(tmp_path / "small-groups" / "data" / shard_names(1)[0])
    big = pq.ParquetFile(tmp_path / "big-groups" / "data" / shard_names(1)[0])
    assert small.metadata.num_row_groups > 3 and big.metadata.num_row_groups == 1
    assert rows(tmp_path / "small-groups") == rows(tmp_path / "big-groups")


def test_rerun_with_fewer_trials_removes_stale_shards(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    summaries = write_trace_tree(root, 9, seed=3, outcomes={"success": 1})
    out = tmp_path / "stage" / "traces"
    build(root, out, trials_per_shard=2)
    assert sorted(p.name for p in (out / "data").iterdir()) == shard_names(5)

    for summary in summaries[3:]:
        shutil.rmtree(root / summary.name)
    manifest = build(root, out, trials_per_shard=2)
    assert sorted(p.name for p in (out / "data").iterdir()) == shard_names(2)
    assert [s["name"] for s in manifest["shards"]] == shard_names(2)
    assert [s["rows"] for s in manifest["shards"]] == [2, 1]
    assert sorted(p.name for p in out.parent.iterdir()) == ["traces"]  # no work dirs left behind
    assert {r["trial_name"] for r in rows(out)} == {s.name for s in summaries[:3]}


def test_no_rows_gives_one_empty_shard_with_the_schema(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trace_tree(root, 3, seed=4, outcomes={"failure": 1})
    manifest = build(root, tmp_path / "out", filter="success")
    assert manifest["row_count"] == 0 and manifest["trials_filtered_out"] == 3
    assert manifest["result_coverage"] == 1.0
    table = pq.read_table(tmp_path / "out" / "data" / shard_names(1)[0])
    assert table.num_rows == 0 and table.column_names == list(COLUMNS)
    assert manifest["shards"][0]["rows"] == 0

    empty = tmp_path / "empty"
    empty.mkdir()
    manifest = build(empty, tmp_path / "out-empty")
    assert (manifest["result_count"], manifest["row_count"], manifest["result_coverage"]) == (0, 0, 1.0)


# ----------------------------------------------------------------------------- coverage gate

def _tree_with_setup_failures(root: Path, good: int, failed: int) -> None:
    for plan in plan_trials(good + failed, seed=11, steps=(1, 1))[:good]:
        write_trial(root, plan.name, seed=11, outcome="success", n_steps=1, task=plan.task, pane=False)
    for plan in plan_trials(good + failed, seed=11, steps=(1, 1))[good:]:
        write_trial(root, plan.name, seed=11, outcome="setup_error", n_steps=1, task=plan.task, pane=False)


def test_coverage_exactly_at_the_gate_passes(tmp_path: Path) -> None:
    _tree_with_setup_failures(tmp_path / "trace_jobs", good=95, failed=5)
    manifest = build(tmp_path / "trace_jobs", tmp_path / "out")
    assert (manifest["result_count"], manifest["row_count"]) == (100, 95)
    assert manifest["result_coverage"] == 0.95
    assert manifest["malformed"] == {"missing_trajectory": 5}


def test_coverage_just_under_the_gate_fails_and_withdraws_the_old_export(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    _tree_with_setup_failures(root, good=94, failed=6)
    out = tmp_path / "stage" / "traces"
    build(root, out, min_coverage=0.9)  # a complete earlier export of this out dir
    assert (out / MANIFEST_NAME).is_file()

    with pytest.raises(CoverageError) as caught:
        build(root, out)
    assert str(caught.value) == "result coverage below threshold: 94/100 = 94.00%; required >= 95.00%"
    assert isinstance(caught.value, RlkeepError)
    assert not (out / MANIFEST_NAME).exists() and not (out / "data").exists()
    rejected = json.loads((out / REJECTED_MANIFEST_NAME).read_text())
    assert rejected["status"] == "rejected" and rejected["malformed"] == {"missing_trajectory": 6}
    assert sorted(p.name for p in out.parent.iterdir()) == ["traces"]

    manifest = build(root, out, min_coverage=0.94)  # a passing rerun clears the rejection
    assert manifest["row_count"] == 94 and not (out / REJECTED_MANIFEST_NAME).exists()


def test_coverage_message_format() -> None:
    assert coverage_message(97, 100, 0.95) == "result coverage below threshold: 97/100 = 97.00%; required >= 95.00%"


# ----------------------------------------------------------------------------- malformed trials

def test_malformed_trials_are_counted_by_reason(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    good = write_trace_tree(root, 4, seed=5, outcomes={"success": 1})
    broken = {
        "invalid_json_trajectory": lambda d: (d / "agent/trajectory.json").write_text(
            '{"schema_version": "ATIF-v1.6", "steps": ['),
        "not_atif": lambda d: (d / "agent/trajectory.json").write_text(json.dumps({"messages": []})),
        "empty_steps": lambda d: (d / "agent/trajectory.json").write_text(
            json.dumps({"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2", "version": "2"}, "steps": []})),
        "missing_trajectory": lambda d: (d / "agent/trajectory.json").unlink(),
        "invalid_json_result": lambda d: (d / "result.json").write_text("{not json"),
        "no_user_turn": lambda d: (d / "agent/trajectory.json").write_text(json.dumps(
            {"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2", "version": "2"},
             "steps": [{"step_id": 1, "source": "agent", "message": "starting without a prompt"}]})),
        "no_agent_steps": lambda d: (d / "agent/trajectory.json").write_text(json.dumps(
            {"schema_version": "ATIF-v1.8", "agent": {"name": "terminus-2", "version": "2"},
             "steps": [{"step_id": 1, "source": "user", "message": "hi"}]})),
    }
    for reason, breaker in broken.items():
        name = f"broken-{reason.replace('_', '-')}__AAAAAAA"
        write_trial(root, name, seed=5, n_steps=2)
        breaker(root / name)
    write_trial(root, "still-running__BBBBBBB", seed=5, outcome="incomplete", n_steps=2)
    (root / ".synced_from").write_text("s3://bucket/trace_jobs\n")

    manifest = build(root, tmp_path / "out", min_coverage=0)
    assert manifest["malformed"] == {**{reason: 1 for reason in broken}, "missing_result": 1}
    assert manifest["malformed_examples"]["not_atif"] == ["broken-not-atif__AAAAAAA"]
    assert manifest["result_count"] == 4 + len(broken)  # the unfinished trial has no result.json
    assert manifest["row_count"] == 4 == manifest["trials_exported"]
    assert manifest["result_count"] == manifest["trials_exported"] + sum(
        count for reason, count in manifest["malformed"].items() if reason != "missing_result")
    assert {r["trial_name"] for r in rows(tmp_path / "out")} == {s.name for s in good}


# ----------------------------------------------------------------------------- unsafe tars

@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink", "hardlink", "device", "fifo"])
def test_unsafe_tar_member_refuses_the_whole_tar(tmp_path: Path, kind: str) -> None:
    tar_path = tmp_path / "trace_jobs.tar"
    member = write_unsafe_tar(tar_path, kind)
    dest = tmp_path / "extracted"
    with pytest.raises(RlkeepError) as caught:
        safe_extract(tar_path, dest)
    assert repr(member) in str(caught.value) and "refusing the whole tar" in str(caught.value)
    assert not dest.exists()
    assert not (tmp_path / "escaped.txt").exists()

    out = tmp_path / "stage" / "traces"
    with pytest.raises(RlkeepError) as caught:
        build(tar_path, out)
    assert repr(member) in str(caught.value)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_safe_extract_writes_plain_files(mixed_tree, tmp_path: Path) -> None:
    root, summaries = mixed_tree
    tar_path = tmp_path / "t.tar"
    count = tar_tree(root, tar_path)
    dest = tmp_path / "x"
    assert safe_extract(tar_path, dest) == count
    assert sorted(t.name for t in iter_trials(dest)) == sorted(s.name for s in summaries)
    first = summaries[0].name
    assert (dest / first / "result.json").read_bytes() == (root / first / "result.json").read_bytes()


def test_tar_digest_is_checked_against_the_sync_manifest(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    tar_path = tmp_path / "t.tar"
    tar_tree(root, tar_path)
    with pytest.raises(RlkeepError, match="differs from the expected"):
        build(tar_path, tmp_path / "out", source_sha256="0" * 64)
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


# ----------------------------------------------------------------------------- rows

def test_episodes_last_and_all_row_counts(mixed_tree, tmp_path: Path) -> None:
    root, summaries = mixed_tree
    last = build(root, tmp_path / "last", episodes="last")
    every = build(root, tmp_path / "all", episodes="all")
    assert last["row_count"] == len(summaries)
    assert every["row_count"] == sum(s.n_agent_steps for s in summaries)
    assert every["row_count"] > len(summaries) and every["result_coverage"] == 1.0

    last_rows = {r["trial_name"]: r for r in rows(tmp_path / "last")}
    by_trial: dict[str, list[dict]] = {}
    for row in rows(tmp_path / "all"):
        by_trial.setdefault(row["trial_name"], []).append(row)
    for summary in summaries:
        episodes = by_trial[summary.name]
        assert [r["episode"] for r in episodes] == [f"episode-{k}" for k in range(summary.n_agent_steps)]
        for k, row in enumerate(episodes):  # growing prefixes ending with the k-th agent turn
            assert sum(turn["role"] == "assistant" for turn in row["conversations"]) == k + 1
            if k:
                previous = episodes[k - 1]["conversations"]
                assert row["conversations"][:len(previous)] == previous
        assert episodes[-1]["conversations"] == last_rows[summary.name]["conversations"]
        assert last_rows[summary.name]["episode"] == f"episode-{summary.n_agent_steps - 1}"


def test_filter_success_and_failure(mixed_tree, tmp_path: Path) -> None:
    root, summaries = mixed_tree
    success = build(root, tmp_path / "s", filter="success")
    failure = build(root, tmp_path / "f", filter="failure")
    winners = {s.name for s in summaries if s.reward is not None and s.reward > 0}
    assert 0 < len(winners) < len(summaries)
    assert {r["trial_name"] for r in rows(tmp_path / "s")} == winners
    assert {r["trial_name"] for r in rows(tmp_path / "f")} == {s.name for s in summaries} - winners
    assert success["result_coverage"] == failure["result_coverage"] == 1.0
    assert success["trials_filtered_out"] == len(summaries) - len(winners)
    assert success["filter"] == "success" and success["filter_rule"] == "reward > 0 and no exception"


def test_row_columns(mixed_tree, tmp_path: Path) -> None:
    root, summaries = mixed_tree
    build(root, tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "data" / shard_names(1)[0])
    assert table.column_names == list(COLUMNS)
    found = {r["trial_name"]: r for r in table.to_pylist()}
    for summary in summaries:
        row = found[summary.name]
        result = json.loads((root / summary.name / "result.json").read_text())
        assert row["run_id"] == summary.name  # SkyRL trials have no job id
        assert row["task"] == summary.task
        assert row["date"] == result["started_at"]
        assert (row["agent"], row["model"], row["model_provider"]) == ("terminus-2", "hosted_vllm/Qwen3-8B",
                                                                       "hosted_vllm")  # as written, like Harbor
        expected = str(summary.reward) if summary.reward is not None else summary.exception_type
        assert row["result"] == expected
        assert row["instruction"].startswith("You are an AI assistant") and summary.task in row["instruction"]
        if summary.reward is None:
            assert row["verifier_output"] is None
        else:
            verifier = root / summary.name / "verifier"
            expected_output = "".join((verifier / name).read_text() for name in ("test-stdout.txt", "test-stderr.txt")
                                      if (verifier / name).is_file())
            assert "test session starts" in row["verifier_output"] and row["verifier_output"] == expected_output


def test_skimmed_result_json_gives_the_same_shards_as_the_full_parse(mixed_tree, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """Large result.json files are skimmed (only the members the export reads are decoded); the
    rows must not depend on which path read them, and what skimming refuses goes the full way."""
    from rlkeep.traces import trial

    root, _ = mixed_tree
    trials = sorted(p for p in root.iterdir() if (p / "result.json").is_file())
    bulky = trials[0] / "result.json"  # a member nobody reads, with bytes that are not UTF-8
    bulky.write_bytes(bulky.read_bytes().rstrip()[:-1] + b', "rollout_details": ["\xff\xfe", [1, 2, 3]]}')
    (trials[1] / "result.json").write_bytes(b"[1, 2]")  # not an object: malformed either way
    full = build(root, tmp_path / "full")
    monkeypatch.setattr(trial, "SKIM_RESULT_ABOVE_BYTES", 0)
    skimmed = build(root, tmp_path / "skimmed")
    assert shard_bytes(tmp_path / "skimmed") == shard_bytes(tmp_path / "full")
    assert skimmed["malformed"] == full["malformed"] and sum(full["malformed"].values()) >= 1
    assert skimmed["row_count"] == full["row_count"] > 0


def test_lone_surrogate_and_terminal_noise_are_cleaned(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "noisy__FFFFFFF", seed=3, n_steps=8, surrogate=True, noise=True)
    raw = (root / "noisy__FFFFFFF" / "agent" / "trajectory.json").read_text()
    assert "\\ud83d" in raw and "\\u001b[" in raw and "\\r" in raw  # the input really is dirty
    kept = build(root, tmp_path / "raw")  # the default: the text the model saw, surrogates aside
    raw_text = json.dumps(rows(tmp_path / "raw"), ensure_ascii=False)
    assert "\\u001b[" in raw_text and "\\r" in raw_text and "broken emoji \ufffd here" in raw_text
    assert kept["text_changes"]["terminal_noise_cleaned"] is False and "terminal_noise" not in kept["repairs"]
    manifest = build(root, tmp_path / "out", clean_terminal_noise=True)
    assert manifest["text_changes"]["terminal_noise_cleaned"] is True
    assert "Terminal noise was cleaned" in (tmp_path / "out" / "README.md").read_text()
    assert "Terminal noise was not cleaned" in (tmp_path / "raw" / "README.md").read_text()
    text = json.dumps(rows(tmp_path / "out"), ensure_ascii=False)
    for noise in ("\x1b", "\r", "[200~", "[201~", "\\u001b"):
        assert noise not in text
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)
    assert "broken emoji \ufffd here" in text
    assert manifest["repairs"]["lone_surrogate"] >= 1 and manifest["repairs"]["terminal_noise"] >= 1


def test_clean_text_rules() -> None:
    assert clean_text("Downloading  10%\rDownloading 100%\r\nnext") == "Downloading 100%\nnext"
    assert clean_text("abcdef\rXY") == "XYcdef"
    assert clean_text("\x1b[01;32mroot@box\x1b[00m:~# \x1b]0;title\x07ls") == "root@box:~# ls"
    assert clean_text("\x1b[?2004h\x1b[200~paste\x1b[201~ ^[[200~x[201~") == "paste x"
    assert clean_text("bell\x07 nul\x00 tab\tok") == "bell nul tab\tok"
    assert clean_text("lone \udc80 low") == "lone \ufffd low"
    assert clean_text("plain text stays\n") == "plain text stays\n"


# ----------------------------------------------------------------------------- redaction

def test_planted_secret_never_reaches_the_parquet(tmp_path: Path) -> None:
    token = fake_hf_token()
    root = tmp_path / "trace_jobs"
    write_trace_tree(root, 3, seed=9, outcomes={"success": 1})
    write_trial(root, "leaky__GGGGGGG", seed=9, n_steps=4, plant_text=token, plant_step=2)
    assert token in (root / "leaky__GGGGGGG" / "agent" / "trajectory.json").read_text()

    exposed = build(root, tmp_path / "control", redactor=NoRedaction())  # the check can fail
    assert token in json.dumps(rows(tmp_path / "control"))
    assert exposed["redactions"] == {}

    manifest = build(root, tmp_path / "out", redactor=Redactor())
    values = json.dumps(rows(tmp_path / "out"), ensure_ascii=False)
    assert token not in values and token[3:20] not in values
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes()
    assert sum(manifest["redactions"].values()) >= 2  # the observation and the message
    assert token not in (tmp_path / "out" / MANIFEST_NAME).read_text()


def test_default_redactor_comes_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    literal = "corp-internal-" + "passphrase-4417"
    monkeypatch.setenv("HF_TOKEN", literal)
    root = tmp_path / "trace_jobs"
    write_trial(root, "env-secret__HHHHHHH", seed=2, n_steps=3, plant_text=literal)
    manifest = build_trace_dataset(root, tmp_path / "out")
    assert literal not in json.dumps(rows(tmp_path / "out"))
    assert sum(manifest["redactions"].values()) >= 1


# ----------------------------------------------------------------------------- CLI

def test_cli_stage_only(mixed_tree, tmp_path: Path, capsys) -> None:
    root, summaries = mixed_tree
    stage = tmp_path / "stage"
    assert cli_main(["--job-dir", str(root), "--repo-id", "org/traces", "--stage-only", str(stage),
                     "--episodes", "all", "--filter", "none"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "staged" and printed["row_count"] == sum(s.n_agent_steps for s in summaries)
    assert (stage / MANIFEST_NAME).is_file() and (stage / "data" / shard_names(1)[0]).is_file()


def test_cli_refuses_bad_arguments_and_reports_coverage(tmp_path: Path, capsys) -> None:
    root = tmp_path / "trace_jobs"
    _tree_with_setup_failures(root, good=9, failed=1)
    with pytest.raises(SystemExit):
        cli_main(["--job-dir", str(root), "--repo-id", "org/x", "--single-commit", "--stage-only", str(tmp_path / "s")])
    with pytest.raises(RlkeepError, match="ORG/NAME"):
        cli_main(["--job-dir", str(root), "--repo-id", "no-slash", "--stage-only", str(tmp_path / "s")])
    status = cli.main(["traces-dataset", "--job-dir", str(root), "--repo-id", "org/x",
                       "--stage-only", str(tmp_path / "s")])
    assert status == 1
    assert "rlkeep: result coverage below threshold: 9/10 = 90.00%; required >= 95.00%" in capsys.readouterr().err
    assert not (tmp_path / "s" / MANIFEST_NAME).exists()


def test_cli_single_commit_replaces_remote_shards(hub_server, tmp_path: Path, monkeypatch, capsys) -> None:
    for key, value in hub_env(hub_server.url, hub_server.token, base={}).items():
        monkeypatch.setenv(key, value)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    root = tmp_path / "trace_jobs"
    write_trace_tree(root, 7, seed=12, outcomes={"success": 1})
    common = ["--repo-id", "org/rl-traces", "--single-commit", "--trials-per-shard", "2"]
    assert cli_main(["--job-dir", str(root), *common]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["status"] == "published" and first["shards"] == shard_names(4)
    assert first["verification"]["status"] == "completed"

    for trial in sorted(root.iterdir())[2:]:  # fewer trials: the remote stale shards must go
        shutil.rmtree(trial)
    tar_path = tmp_path / "trace_jobs.tar"
    tar_tree(root, tar_path)
    assert cli_main(["--job-dir", str(tar_path), *common]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["shards"] == shard_names(1)
    assert sorted(second["publication"]["deleted"]) == [f"data/{name}" for name in shard_names(4)]

    from huggingface_hub import HfApi
    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    remote = api.list_repo_files("org/rl-traces", repo_type="dataset")
    assert sorted(p for p in remote if p.startswith("data/")) == [f"data/{shard_names(1)[0]}"]
    assert MANIFEST_NAME in remote and "README.md" in remote  # the dataset card goes in the same commit
    card = Path(api.hf_hub_download("org/rl-traces", "README.md", repo_type="dataset",
                                    local_dir=tmp_path / "card")).read_text()
    assert "Trials with a result.json: 2" in card and "Filter: `none`" in card
    assert list(scratch.iterdir()) == []  # the temporary staging is gone after verification


def test_a_changed_card_on_the_hub_fails_verification(hub_server, tmp_path: Path) -> None:
    from rlkeep.hub import replace_trace_shards, verify_trace_publication

    root = tmp_path / "trace_jobs"
    write_trace_tree(root, 3, seed=13, outcomes={"success": 1})
    stage = tmp_path / "stage"
    build(root, stage)
    published = replace_trace_shards(stage, "org/card-check", private=True, endpoint=hub_server.url,
                                     token=hub_server.token, commit_message="traces")
    assert "README.md" in published["uploaded"]
    verify_trace_publication(stage, "org/card-check", published["commit"], endpoint=hub_server.url,
                             token=hub_server.token)
    hub_server.edit_file("org/card-check", "README.md", b"# someone else's card\n", repo_type="dataset")
    with pytest.raises(RlkeepError, match=r"README\.md: (size|content|sha256) differs"):
        verify_trace_publication(stage, "org/card-check", published["commit"], endpoint=hub_server.url,
                                 token=hub_server.token)


def test_cli_keeps_the_staging_when_publication_fails(hub_server, tmp_path: Path, monkeypatch) -> None:
    for key, value in hub_env(hub_server.url, "not-the-server-token", base={}).items():
        monkeypatch.setenv(key, value)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    root = tmp_path / "trace_jobs"
    write_trace_tree(root, 2, seed=13, outcomes={"success": 1})
    with pytest.raises(RlkeepError) as caught:
        cli_main(["--job-dir", str(root), "--repo-id", "org/rl-traces", "--single-commit"])
    assert "staged export kept at" in str(caught.value)
    kept = [path for path in scratch.rglob(MANIFEST_NAME)]
    assert len(kept) == 1 and (kept[0].parent / "data" / shard_names(1)[0]).is_file()
    assert "not-the-server-token" not in str(caught.value)


def test_bad_options_are_refused_before_any_work(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    for options in ({"episodes": "first"}, {"filter": "all"}, {"min_coverage": 1.5}, {"trials_per_shard": 0}):
        with pytest.raises(RlkeepError):
            build(root, tmp_path / "out", **options)
    with pytest.raises(RlkeepError, match="does not exist"):
        build(tmp_path / "missing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- never delete what is not ours


def test_stage_only_replaces_only_its_own_shards_and_keeps_every_other_file(mixed_tree, tmp_path: Path, capsys) -> None:
    root, _ = mixed_tree
    stage = tmp_path / "stage"
    theirs = {"README.md": b"# my notes\n", ".gitattributes": b"*.parquet filter=lfs\n",
              "data/validation-00000.parquet": b"PAR1 not ours", "data/train-00000.parquet.bak": b"backup",
              "notes/inspect.ipynb": b"{}"}
    for rel, data in theirs.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_bytes(data)
    (stage / "data" / "train-00007.parquet").write_bytes(b"stale shard of an earlier export")
    assert cli_main(["--job-dir", str(root), "--repo-id", "org/traces", "--stage-only", str(stage)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    for rel, data in theirs.items():
        assert (stage / rel).read_bytes() == data, rel
    assert printed["kept_files"] == sorted(theirs)
    saved = json.loads((stage / MANIFEST_NAME).read_text())
    assert saved["card"]["written"] is False and "not ours" in saved["card"]["reason"]  # their README stays
    assert f"rlkeep: kept {len(theirs)} file(s) in {stage} that this export did not write" in captured.err
    assert not (stage / "data" / "train-00007.parquet").exists()  # a stale shard of ours is replaced
    shards = sorted(p.name for p in (stage / "data").glob("train-*.parquet"))
    assert shards == printed["shards"] and (stage / MANIFEST_NAME).is_file()

    # under the coverage gate our shards are withdrawn; theirs still stay
    with pytest.raises(CoverageError):
        _under_gate(stage, tmp_path)
    assert not list((stage / "data").glob("train-*.parquet")) and not (stage / MANIFEST_NAME).exists()
    for rel, data in theirs.items():
        assert (stage / rel).read_bytes() == data, rel


def _under_gate(stage: Path, tmp_path: Path) -> None:
    root = tmp_path / "gated"
    _tree_with_setup_failures(root, good=9, failed=1)
    build(root, stage)


def test_something_not_ours_where_the_export_writes_stops_it_before_any_change(mixed_tree, tmp_path: Path) -> None:
    root, _ = mixed_tree
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "data").write_text("a file where the shard folder goes")
    with pytest.raises(RlkeepError, match=r"data is not a folder; the export replaces only its own "
                                          r"data/train-\*\.parquet shards and manifest"):
        build(root, stage)
    assert (stage / "data").read_text() == "a file where the shard folder goes"
    (stage / "data").unlink()
    (stage / "data" / "train-00000.parquet").mkdir(parents=True)
    (stage / "data" / "train-00000.parquet" / "keep.txt").write_text("x")
    with pytest.raises(RlkeepError, match=r"train-00000\.parquet is not a regular file"):
        build(root, stage)
    assert (stage / "data" / "train-00000.parquet" / "keep.txt").read_text() == "x"
