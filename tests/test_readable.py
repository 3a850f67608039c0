"""Numbers and words as the operator reads them: formats, plurals, "refused", "did you mean", an
empty record, the banner's full record error."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlkeep.campaign import index_html, load_campaign
from rlkeep.errors import RecordError
from rlkeep.readable import column, columns, did_you_mean, duration, number, plural
from rlkeep.records import RecordRefused, load_record
from rlkeep.run_report import vllm_sections
from tests.support.campaign import write_record


@pytest.mark.parametrize(("value", "text"), [
    (20350.4, "20,350"), (6831, "6,831"), (10170.0, "10,170"), (0.123456, "0.123"), (1.5, "1.50"),
    (12.345, "12.3"), (0.0, "0"), (-0.5, "-0.500"), (True, "True"), (None, ""), ("x", "x"), (3e-7, "3.00e-07")])
def test_a_number_has_separators_and_three_significant_digits_without_an_exponent(value, text) -> None:
    assert number(value) == text


def test_a_column_shares_one_format() -> None:
    assert column([20350.4, 6831.0, 12.25, None, "n/a"]) == ["20,350", "6,831", "12", "", "n/a"]
    assert column([0.5, 0.25, 0.125]) == ["0.500", "0.250", "0.125"]
    assert column([0.5, 0.003]) == ["0.50000", "0.00300"]  # the small value keeps its digits
    assert columns([[1, 2.5], [2, 1200.0]]) == [["1", "2"], ["2", "1,200"]]
    assert not any("e+" in cell for row in columns([[2.035e4, 6831.0], [1.017e4, 3.0]]) for cell in row)


def test_the_vllm_table_has_no_exponents() -> None:
    per_second = [{"second": s, "engines": 2, "prompt_tokens_per_s": 20350.0 + s, "generation_tokens_per_s": 10170.5,
                   "running_reqs": 3.0, "waiting_reqs": 0.0, "kv_cache_usage_pct": 41.25,
                   "prefix_cache_hit_rate_pct": 12.5} for s in range(6831)]
    (_, _, table, _), = vllm_sections(per_second)
    cells = [cell for row in table for cell in row[1:]]
    assert not any("e+" in cell for cell in cells), cells
    assert ["6,831"] == list({row[3] for row in table})


@pytest.mark.parametrize(("seconds", "text"), [
    (20460, "5 h 41 min"), (7200, "2 h"), (200, "3 min 20 s"), (12.4, "12 s"), (3 * 86400 + 5 * 3600, "3 d 5 h"),
    (None, "")])
def test_durations_read_in_hours_and_minutes(seconds, text) -> None:
    assert duration(seconds) == text


def test_plurals_agree_with_their_count() -> None:
    assert plural(1, "record") == "1 record" and plural(2, "record") == "2 records"
    assert plural(1, "run has", "runs have") == "1 run has" and plural(0, "run has", "runs have") == "0 runs have"
    assert plural(1200, "attempt") == "1,200 attempts"


def test_did_you_mean_is_within_two_edits() -> None:
    known = ["chain", "store", "job", "checkpoint"]
    assert did_you_mean("chian", known) == "chain"
    assert did_you_mean("stroe", known) == "store"
    assert did_you_mean("chainz", known) == "chain"
    assert did_you_mean("namespace", known) is None


GOOD = {"job": "rl-a", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-a"], "store": "s3://runs/rl-a",
        "checkpoint": {"interval": 20}}


def test_a_key_typo_is_refused_with_did_you_mean(tmp_path: Path) -> None:
    data = dict(GOOD)
    data["chian"] = data.pop("chain")
    path = write_record(tmp_path, data)
    with pytest.raises(RecordRefused) as raised:
        load_record(path)
    assert "unknown key 'chian' in the top level (did you mean 'chain'?)" in str(raised.value)
    far = write_record(tmp_path, {**GOOD, "namespace": "x"})
    with pytest.raises(RecordRefused) as raised:
        load_record(far)
    assert "did you mean" not in str(raised.value)


def test_a_rule_key_typo_gets_did_you_mean(tmp_path: Path) -> None:
    path = write_record(tmp_path, {**GOOD, "checkpoint": {"interval": 20, "rule": {"kind": "ema_max", "metric": "m",
                                                                                   "alpha": 0.3, "min_stpe": 5}}})
    with pytest.raises(RecordError, match=r"unknown key 'min_stpe' .*\(did you mean 'min_step'\?\)"):
        load_record(path)


def test_an_empty_record_says_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "records" / "rl-empty.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("# nothing yet\n")
    with pytest.raises(RecordError) as raised:
        load_record(path)
    assert "the record is empty" in str(raised.value) and "NoneType" not in str(raised.value)


def test_the_index_says_refused_and_shows_the_full_error(tmp_path: Path) -> None:
    data = dict(GOOD, job="rl-typo")
    data["chian"] = data.pop("chain")
    write_record(tmp_path, data)
    views = load_campaign(tmp_path, Path("records"))
    text = index_html(views, generated_at="t", revision="r")
    assert "1 record: 1 refused." in text
    assert "1 run needs an operator" in text
    banner = text.split('id="banner"', 1)[1].split("</section>", 1)[0]
    assert "did you mean &#x27;chain&#x27;?); expected only: archive," in banner and "tracker_url, user" in banner
    assert "unreadable" not in banner
    assert "0 runs have a selected step" in text
