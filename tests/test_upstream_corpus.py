"""rlkeep's log readers over logs the upstream code wrote (tests/data/upstream/, SOURCES.md), and
any prefix of such a log is a log (issue 27): cut at any byte, NUL or garbage tails, random bytes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlkeep import batch_errors, vllm_stats
from rlkeep.metrics import MetricsError, chain_surface, parse_log_file

CORPUS = Path(__file__).parent / "data" / "upstream"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
METRIC_LOGS = {"skyrl_console.worker.out": "skyrl-console", "skyrl_console.driver.log": "skyrl-console",
               "marin_wandb_mirror.driver.log": "wandb-json"}
# A chain of two attempts as upstream printed them: the mirror, then a resumed attempt's console logger.
CHAIN = [("rl-a", "marin_wandb_mirror.driver.log"), ("rl-a-r1", "skyrl_console.driver.log")]
TAIL_BYTES = 2048
FAST = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def console_value(value: Any) -> Any:
    """What SkyRL's ConsoleLogger keeps of a value: floats as '%.4f' strings, read back as numbers."""
    return float(f"{value:.4f}") if isinstance(value, float) else value


@pytest.mark.parametrize("name", sorted(METRIC_LOGS))
def test_upstream_metric_logs_give_the_values_they_were_written_with(name: str) -> None:
    parsed = parse_log_file(CORPUS / name)
    assert parsed.serialization == METRIC_LOGS[name] and parsed.skipped == []
    convert = console_value if METRIC_LOGS[name] == "skyrl-console" else (lambda value: value)
    got = {row["global_step"]: {k: v for k, v in row.items() if k not in ("global_step", "line")} for row in parsed.rows}
    assert got == {int(step): {k: convert(v) for k, v in values.items()} for step, values in EXPECTED["steps"].items()}


def test_vllm_own_log_gives_the_reported_numbers_per_second() -> None:
    lines = (CORPUS / "vllm_v1.vllm.log").read_text().splitlines()
    rows = vllm_stats.per_second(vllm_stats.scan_lines(lines, "rl-a", source="vllm_v1.vllm.log"))
    by_time: dict[str, list[dict[str, Any]]] = {}
    for report in EXPECTED["vllm"]:
        by_time.setdefault(report["time"], []).append(report)
    assert [row["time"] for row in rows] == list(by_time)
    for row in rows:
        reports = by_time[row["time"]]
        printed = [{key: float(f"{value:.1f}") if isinstance(value, float) else value for key, value in r.items()}
                   for r in reports]  # vLLM prints one decimal
        assert row["engines"] == len(reports) and row["source"] == "vllm_v1.vllm.log"
        assert row["prompt_tokens_per_s"] == pytest.approx(sum(r["prompt"] for r in printed))
        assert row["running_reqs"] == sum(r["running"] for r in printed)
        assert row["kv_cache_usage_pct"] == pytest.approx(sum(r["kv"] for r in printed) / len(printed))
        assert row["prefix_cache_hit_rate_pct"] == pytest.approx(sum(r["prefix"] for r in printed) / len(printed))


# --------------------------------------------------------------------------- any prefix of a log is a log

def chain_bytes() -> list[tuple[str, str, bytes]]:
    return [(attempt, name, (CORPUS / name).read_bytes()) for attempt, name in CHAIN]


def surface_rows(logs: list[tuple[str, str, bytes]]) -> list[dict[str, Any]] | str:
    """The rows the chain gives, without line numbers (a re-logged step keeps the last line), or the
    error when the chain has no parsable metric line at all."""
    try:
        surface = chain_surface(logs)
    except MetricsError as error:
        return f"blocked: {type(error).__name__}"
    return [{k: v for k, v in row.items() if k != "line"} for row in surface.rows]


def complete_lines(data: bytes, cut: int) -> tuple[bytes, bytes]:
    """The log's complete lines before the cut, and the same through the line the cut falls in."""
    before = data[:data.rfind(b"\n", 0, cut) + 1]
    end = data.find(b"\n", cut)
    return before, data[:len(data) if end < 0 else end + 1]


def test_cutting_the_last_attempt_at_every_byte_of_its_last_2kb_gives_the_complete_lines_surface() -> None:
    logs = chain_bytes()
    attempt, source, last = logs[-1]
    whole_lines: dict[bytes, Any] = {}  # the surface of each complete-lines prefix, computed once

    def lines_surface(prefix: bytes) -> Any:
        if prefix not in whole_lines:
            whole_lines[prefix] = surface_rows([*logs[:-1], (attempt, source, prefix)])
        return whole_lines[prefix]

    checked = 0
    for cut in range(max(0, len(last) - TAIL_BYTES), len(last) + 1):
        got = surface_rows([*logs[:-1], (attempt, source, last[:cut])])
        # Never blocked (the first attempt is whole), and the cut line counts whole or not at all.
        allowed = [lines_surface(prefix) for prefix in complete_lines(last, cut)]
        assert not isinstance(got, str) and got in allowed, (cut, got)
        checked += 1
    assert checked > 500


@FAST
@given(st.integers(0, TAIL_BYTES), st.one_of(
    st.integers(1, 4096).map(lambda n: b"\0" * n),
    st.binary(max_size=300).map(lambda data: data.replace(b"{", b"(")),
    st.tuples(st.integers(1, 400), st.integers(0, 300)).map(
        lambda cut_nul: (CORPUS / "marin_wandb_mirror.driver.log").read_bytes().splitlines(True)[0][:cut_nul[0]]
        + b"\0" * cut_nul[1])))
def test_a_tail_of_nul_bytes_or_garbage_after_a_cut_changes_nothing_but_the_cut(back: int, tail: bytes) -> None:
    logs = chain_bytes()
    attempt, source, last = logs[-1]
    cut = max(0, len(last) - back)
    before, through = complete_lines(last, cut)
    got = surface_rows([*logs[:-1], (attempt, source, last[:cut] + tail)])
    allowed = [surface_rows([*logs[:-1], (attempt, source, prefix)]) for prefix in (before, through)]
    assert not isinstance(got, str) and got in allowed, got


def test_a_cut_metric_line_is_counted_with_its_file_and_line() -> None:
    logs = chain_bytes()
    first_attempt, source, mirror = logs[0]
    lines = mirror.splitlines(True)
    cut = b"".join(lines[:-1]) + lines[-1][:lines[-1].index(b"metrics={") + 40] + b"\0" * 700
    surface = chain_surface([(first_attempt, source, cut), *logs[1:]])
    [skipped] = surface.skipped_lines()
    assert (skipped["attempt"], skipped["source"], skipped["line"], skipped["kind"]) == (
        first_attempt, source, len(lines), "wandb-json")


@FAST
@given(st.binary(max_size=2000))
def test_random_bytes_never_make_a_log_reader_raise_anything_but_its_documented_error(data: bytes) -> None:
    try:
        chain_surface([("a", "random.log", data)])
    except MetricsError as error:
        assert str(error).startswith(("random.log", "no attempt of the chain")), error
    text = data.decode("utf-8", "replace").splitlines()
    vllm_stats.per_second(vllm_stats.scan_lines(text, "a", source="random.log"))
    batch_errors.rows(batch_errors.scan_lines(text, "a", source="random.log"))


@FAST
@given(st.lists(st.sampled_from([
    "Batch generation complete: 9" * 3 + "/1 successful, 1 failed instances, 0 masked",
    "INFO 03-30 17:05:40 [loggers.py:123] Engine 000: Avg prompt throughput: 1.2.3 tokens/s, Running: 1..0 reqs",
    "Exception breakdown: {[1]: 2}", "Exception breakdown: " + "[" * 5000, "Step 9" + "9" * 5000 + ":",
    "WANDB_MIRROR kind=train step=" + "7" * 5000 + " metrics={}", "[repeated " + "3" * 5000 + "x across cluster]",
    "{'async/x': {[1]: 2}, 'trainer/global_step': 1}", '{"step": ' + "[" * 5000 + "}"]), max_size=6))
def test_garbled_stat_batch_and_metric_lines_are_skipped_not_raised(lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode()
    try:
        chain_surface([("a", "garbled.log", data)])
    except MetricsError:
        pass
    vllm_stats.per_second(vllm_stats.scan_lines(lines, "a", source="garbled.log"))
    batch_errors.rows(batch_errors.scan_lines(lines, "a", source="garbled.log"))
