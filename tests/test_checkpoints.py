"""Checkpoint candidates from a real store-shaped tree, and selection by the declared rule."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlkeep.checkpoints import (
    Candidate,
    candidates_from_listing,
    keys_to_read,
    select_checkpoint,
    valid_candidates,
)
from rlkeep.errors import BlockedError, RlkeepError
from rlkeep.metrics import build_surface

PAYLOAD = b"PK\x03\x04" + b"\x00" * 60  # stands in for a torch.save zip; only sizes matter here


def write(root: Path, rel: str, data: bytes | str = PAYLOAD) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def fsdp_step(root: Path, step: int, world: int = 2, *, config_world: int | None = None,
              skip: tuple[str, ...] = (), zero: tuple[str, ...] = (), huggingface: bool = True,
              fsdp_config: bool = True) -> None:
    base = f"ckpts/global_step_{step}/"
    files = ["trainer_state.pt", "data.pt"]
    files += [f"policy/{kind}_world_size_{world}_rank_{rank}.pt"
              for kind in ("model", "optim", "extra_state") for rank in range(world)]
    for rel in files:
        if rel not in skip:
            write(root, base + rel, b"" if rel in zero else PAYLOAD)
    if fsdp_config:
        write(root, base + "policy/fsdp_config.json",
              json.dumps({"fsdp_strategy": "fsdp", "world_size": config_world or world}, indent=4))
    if huggingface:
        write(root, base + "policy/huggingface/config.json", '{"model_type": "qwen3"}')
        write(root, base + "policy/huggingface/tokenizer.json", "{}")


def hf_export(root: Path, step: int, *, shards: int = 2, drop_shard: bool = False, where: str = "policy") -> None:
    base = f"exports/global_step_{step}/{where}/"
    write(root, base + "config.json", '{"model_type": "qwen3"}')
    write(root, base + "tokenizer.json", "{}")
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    index = {"metadata": {"total_size": 128}, "weight_map": {f"layer.{i}.weight": name for i, name in enumerate(names)}}
    write(root, base + "model.safetensors.index.json", json.dumps(index, indent=2, sort_keys=True))
    for name in names[: -1 if drop_shard else None]:
        write(root, base + name, b"\x10" + b"\x00" * 71)


def listing(root: Path) -> dict[str, int]:
    """What a store listing gives: keys relative to the run root -> sizes."""
    keys = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            keys[path.relative_to(root).as_posix()] = path.stat().st_size
    return keys


def candidates(root: Path, *, interval: int = 20, read: bool = True) -> dict[int, Candidate]:
    keys = listing(root)
    txt = root / "ckpts" / "latest_ckpt_global_step.txt"
    contents = {key: (root / key).read_bytes() for key in keys_to_read(keys)} if read else {}
    found = candidates_from_listing(keys, ckpts_prefix="ckpts", exports_prefix="exports",
                                    latest_step_text=txt.read_text() if txt.exists() else None,
                                    interval=interval, contents=contents)
    return {candidate.step: candidate for candidate in found}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    for step in (20, 40):
        fsdp_step(root, step)
        hf_export(root, step)
    write(root, "ckpts/latest_ckpt_global_step.txt", "40")
    return root


# --------------------------------------------------------------------------- candidates

def test_complete_fsdp_and_export_candidates(run):
    found = candidates(run)
    assert sorted(found) == [20, 40]
    twenty = found[20]
    assert twenty.complete and twenty.sources == ["fsdp", "hf_export"] == twenty.complete_sources
    assert "fsdp: complete: trainer_state.pt and 2 ranks of model/optim/extra_state, fsdp_config.json world_size 2" in twenty.reasons
    assert "hf_export: complete: config.json and 2 safetensors files" in twenty.reasons
    assert "ckpts/global_step_20/policy/model_world_size_2_rank_1.pt" in twenty.keys["fsdp"]
    assert "exports/global_step_20/policy/model-00002-of-00002.safetensors" in twenty.keys["hf_export"]
    assert json.loads(json.dumps(twenty.to_json()))["step"] == 20
    assert Candidate.from_json(twenty.to_json()) == twenty


def test_missing_rank_file_is_incomplete_with_its_name(tmp_path):
    fsdp_step(tmp_path, 20, world=4, skip=("policy/optim_world_size_4_rank_3.pt",))
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "20")
    (candidate,) = candidates(tmp_path).values()
    assert not candidate.complete and candidate.complete_sources == []
    assert "fsdp: missing policy/optim_world_size_4_rank_3.pt (world size 4)" in candidate.reasons


def test_world_size_disagreeing_with_fsdp_config_is_incomplete(tmp_path):
    fsdp_step(tmp_path, 20, world=2, config_world=8)
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "20")
    (candidate,) = candidates(tmp_path).values()
    assert not candidate.complete
    assert "fsdp: policy/fsdp_config.json world_size 8 != 2 (rank files model_world_size_2_*)" in candidate.reasons


def test_zero_size_file_is_incomplete(tmp_path):
    fsdp_step(tmp_path, 20, zero=("policy/model_world_size_2_rank_0.pt",))
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "20")
    (candidate,) = candidates(tmp_path).values()
    assert not candidate.complete
    assert "fsdp: zero-size policy/model_world_size_2_rank_0.pt" in candidate.reasons


def test_step_beyond_the_latest_txt_is_incomplete(run):
    fsdp_step(run, 60)  # all files present, but the txt (written last) still says 40
    found = candidates(run)
    assert not found[60].complete
    assert "fsdp: step 60 is beyond latest_ckpt_global_step.txt (40): the save never finished" in found[60].reasons
    assert found[40].complete


def test_tmp_hf_export_leftover_is_never_an_export(run):
    hf_export(run, 60, where=".tmp-hf-export-a1b2")
    hf_export(run, 40, where=".old-hf-export-c3d4")
    found = candidates(run)
    assert not found[60].complete and found[60].sources == ["hf_export"]
    assert any("only a leftover of an interrupted export, never an export: exports/global_step_60/.tmp-hf-export-a1b2"
               in reason for reason in found[60].reasons)
    # a leftover next to a finished export does not spoil it
    assert found[40].complete and any(".old-hf-export-c3d4" in reason for reason in found[40].reasons)
    assert all(".old-hf-export" not in key for key in found[40].keys["hf_export"])


def test_export_missing_a_shard_named_by_the_index(run):
    hf_export(run, 60, drop_shard=True)
    found = candidates(run)
    assert not found[60].complete
    assert "hf_export: missing model-00002-of-00002.safetensors named by the index" in found[60].reasons


def test_export_index_content_must_be_read(run):
    found = candidates(run, read=False)
    assert not any(candidate.complete for candidate in found.values())
    assert any("content of exports/global_step_20/policy/model.safetensors.index.json was not provided" in reason
               for reason in found[20].reasons)


def test_single_file_export_and_off_interval_final_step(tmp_path):
    fsdp_step(tmp_path, 20)
    fsdp_step(tmp_path, 37)
    write(tmp_path, "exports/global_step_37/policy/config.json", "{}")
    write(tmp_path, "exports/global_step_37/policy/model.safetensors", b"\x08" + b"\x00" * 40)
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "37")
    found = candidates(tmp_path)
    assert found[37].complete and found[37].complete_sources == ["fsdp", "hf_export"]
    assert "hf_export: complete: config.json and 1 safetensors file" in found[37].reasons
    assert "note: off-interval step (interval 20): the final save of a run" in found[37].reasons
    assert not any("off-interval" in reason for reason in found[20].reasons)


def test_finished_export_beyond_the_txt_stays_valid_while_its_fsdp_save_does_not(run):
    fsdp_step(run, 60)
    hf_export(run, 60)
    found = candidates(run)
    assert found[60].complete and found[60].complete_sources == ["hf_export"]
    assert any("beyond latest_ckpt_global_step.txt" in reason for reason in found[60].reasons)


def test_txt_naming_a_missing_dir_is_listed(run):
    write(run, "ckpts/latest_ckpt_global_step.txt", "80")
    found = candidates(run)
    assert not found[80].complete
    assert found[80].reasons == ["unknown: latest_ckpt_global_step.txt names step 80 but no global_step_80/ exists"]


def test_pre_124_checkpoint_is_accepted_with_a_note_but_a_lost_config_is_not(tmp_path):
    fsdp_step(tmp_path, 20, huggingface=False, fsdp_config=False)
    fsdp_step(tmp_path, 40, huggingface=True, fsdp_config=False)
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "40")
    found = candidates(tmp_path)
    assert found[20].complete
    assert any("pre-#124 layout" in reason for reason in found[20].reasons)
    assert not found[40].complete
    assert any("missing policy/fsdp_config.json (policy/huggingface/ exists" in reason for reason in found[40].reasons)


def test_megatron_and_deepspeed_checkpoints_are_listed(tmp_path):
    base = "ckpts/global_step_20/"
    write(tmp_path, base + "trainer_state.pt")
    write(tmp_path, base + "policy/metadata.json", json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                                               "common_backend": "torch", "common_backend_version": 1}))
    for name in ("common.pt", ".metadata", "__0_0.distcp", "__1_0.distcp"):
        write(tmp_path, base + "policy/" + name)
    base = "ckpts/global_step_40/"
    write(tmp_path, base + "trainer_state.pt")
    write(tmp_path, base + "policy/latest", "global_step80")
    write(tmp_path, base + "policy/zero_to_fp32.py", "# script")
    for rank in (0, 1):
        write(tmp_path, base + f"policy/global_step80/zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        write(tmp_path, base + f"policy/global_step80/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    base = "ckpts/global_step_60/"  # Megatron async save killed before finalising
    write(tmp_path, base + "trainer_state.pt")
    write(tmp_path, base + "policy/metadata.json", '{"sharded_backend": "torch_dist"}')
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "60")
    found = candidates(tmp_path)
    assert found[20].complete_sources == ["megatron"]
    assert found[40].complete_sources == ["deepspeed"] and "deepspeed: complete: tag global_step80" in found[40].reasons[0]
    assert not found[60].complete and found[60].sources == ["megatron"]
    assert "megatron: missing policy/common.pt, policy/.metadata" in found[60].reasons


def test_keys_to_read_names_the_small_files(run):
    wanted = keys_to_read(listing(run))
    assert wanted == ["ckpts/global_step_20/policy/fsdp_config.json", "ckpts/global_step_40/policy/fsdp_config.json",
                      "ckpts/latest_ckpt_global_step.txt",
                      "exports/global_step_20/policy/model.safetensors.index.json",
                      "exports/global_step_40/policy/model.safetensors.index.json"]


def test_unreadable_latest_txt_is_an_error(run):
    with pytest.raises(RlkeepError, match=r"ckpts/latest_ckpt_global_step.txt: expected a step number, found 'forty'"):
        candidates_from_listing(listing(run), ckpts_prefix="ckpts", exports_prefix="exports",
                                latest_step_text="forty", interval=20)


# --------------------------------------------------------------------------- selection

def make(step: int, complete: bool = True, sources: tuple[str, ...] = ("fsdp",)) -> Candidate:
    return Candidate(step=step, complete=complete, reasons=[] if complete else ["fsdp: missing trainer_state.pt"],
                     sources=list(sources), complete_sources=list(sources) if complete else [])


def surface_rows(rewards: dict[int, object]) -> list[dict]:
    lines = "".join(
        f'WANDB_MIRROR kind=train step={step} metrics={json.dumps({"reward/avg_raw_reward": value, "trainer/global_step": step})}\n'
        for step, value in rewards.items())
    return build_surface([("run", "run.out", lines)]).rows


EMA_RULE = {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 1 / 3}


def test_ema_max_hand_computed_vector():
    selected = select_checkpoint([make(20), make(40)], EMA_RULE, surface_rows({20: 0.2, 40: 0.8}), None)
    assert selected["step"] == 40
    assert selected["ema"] == pytest.approx({20: 0.2, 40: 0.4})
    assert "0.4000" in selected["rationale"] and selected["behavior_break"] is None
    assert selected["rule"] == {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 1 / 3}


def test_ema_max_considers_only_complete_candidates_and_ties_go_earliest():
    rows = surface_rows({20: 0.5, 40: 0.5, 60: 0.9})
    selected = select_checkpoint([make(20), make(40), make(60, complete=False)], EMA_RULE, rows, None)
    assert selected["step"] == 20  # 20 and 40 tie at 0.5; 60 is higher but incomplete
    assert [entry["step"] for entry in selected["candidates_considered"]] == [20, 40]


def test_ema_uses_every_logged_step_not_only_checkpoint_steps():
    rows = surface_rows({step: (1.0 if step <= 20 else 0.0) for step in range(1, 41)})
    selected = select_checkpoint([make(20), make(40)], EMA_RULE, rows, None)
    assert selected["step"] == 20 and selected["ema"][40] < 0.01


def test_latest_rule():
    selected = select_checkpoint([make(20), make(40), make(60, complete=False)], {"kind": "latest"}, [], None)
    assert selected["step"] == 40 and selected["ema"] is None
    assert "highest complete checkpoint" in selected["rationale"]


def test_step_rule_valid_and_invalid():
    cands = [make(20), make(40), make(60, complete=False)]
    assert select_checkpoint(cands, {"kind": "step", "step": 40}, [], None)["step"] == 40
    with pytest.raises(RlkeepError, match=r"checkpoint.rule.step 50 is not a complete saved checkpoint \(no checkpoint "
                                          r"saved at that step\); valid candidates:\n  step 20: fsdp\n  step 40: fsdp"):
        select_checkpoint(cands, {"kind": "step", "step": 50}, [], None)
    with pytest.raises(RlkeepError, match=r"step 60 .*saved but incomplete: fsdp: missing trainer_state.pt"):
        select_checkpoint(cands, {"kind": "step", "step": 60}, [], None)


def test_no_rule_blocks_with_the_candidate_list_and_how_to_declare():
    with pytest.raises(BlockedError) as raised:
        select_checkpoint([make(20, sources=("fsdp", "hf_export")), make(40), make(60, complete=False)], None, [], None)
    message = str(raised.value)
    assert "step 20: fsdp, hf_export\n  step 40: fsdp\n" in message
    assert "step 60" not in message
    assert "checkpoint.rule (kind ema_max | latest | step)" in message
    assert "kind: ema_max" in message and "metric: reward/avg_raw_reward" in message


@pytest.mark.parametrize("kind", ["ema_max", "latest"])
def test_behavior_break_boundary(kind):
    brk = 140
    cands = [make(brk - 20), make(brk), make(brk + 20)]
    rows = surface_rows({120: 0.3, 140: 0.6, 160: 0.9})
    rule = EMA_RULE if kind == "ema_max" else {"kind": "latest"}
    selected = select_checkpoint(cands, rule, rows, brk)
    assert selected["step"] == 120  # 140's rollouts reach the break: not eligible
    assert selected["behavior_break"] == {"step": 140, "last_checkpoint_before": 120, "excluded": [140, 160]}
    assert "the last complete checkpoint whose generating rollouts predate it is step 120" in selected["rationale"]


def test_behavior_break_rejects_a_declared_step_at_the_break():
    cands = [make(120), make(140), make(160)]
    with pytest.raises(RlkeepError, match=r"checkpoint.rule.step 140 does not predate the behavior break at step 140"):
        select_checkpoint(cands, {"kind": "step", "step": 140}, [], 140)
    assert select_checkpoint(cands, {"kind": "step", "step": 120}, [], 140)["step"] == 120


def test_behavior_break_named_when_blocked_too():
    with pytest.raises(BlockedError, match=r"last complete checkpoint whose rollouts predate it is step 120") as raised:
        select_checkpoint([make(120), make(140)], None, [], 140)
    assert "step 120: fsdp\n  step 140: fsdp (not eligible: at or after the behavior break)\n" in str(raised.value)


def test_metric_absent_or_non_numeric_is_a_clear_error():
    with pytest.raises(RlkeepError, match=r"metric 'reward/avg_pass_at_8' is absent from the metric surface"):
        select_checkpoint([make(20)], {**EMA_RULE, "metric": "reward/avg_pass_at_8"}, surface_rows({20: 0.2}), None)
    with pytest.raises(RlkeepError, match=r"non-numeric value 'oops' at step 40 \(run\.out:2\)"):
        select_checkpoint([make(20), make(40)], EMA_RULE, surface_rows({20: 0.2, 40: "oops"}), None)


@pytest.mark.parametrize(("rule", "message"), [
    ({"kind": "best"}, "checkpoint.rule.kind must be one of ema_max, latest, step"),
    ({"kind": "ema_max", "metric": "reward/avg_raw_reward"}, "checkpoint.rule.alpha must be a number"),
    ({"kind": "step", "step": "40"}, "checkpoint.rule.step must be an integer"),
])
def test_malformed_rules(rule, message):
    with pytest.raises(RlkeepError, match=message):
        select_checkpoint([make(20)], rule, surface_rows({20: 0.2}), None)


def test_selection_accepts_candidates_json_and_listing_output(run):
    found = list(candidates(run).values())
    as_json = [candidate.to_json() for candidate in found]
    assert [c.step for c in valid_candidates(as_json)] == [20, 40]
    selected = select_checkpoint(as_json, EMA_RULE, surface_rows({20: 0.2, 40: 0.8}), None)
    assert selected["step"] == 40 and selected["sources"] == ["fsdp", "hf_export"]


def test_no_complete_checkpoint_lists_the_reasons(tmp_path):
    fsdp_step(tmp_path, 20, skip=("trainer_state.pt",))
    write(tmp_path, "ckpts/latest_ckpt_global_step.txt", "20")
    with pytest.raises(RlkeepError, match=r"no complete saved checkpoint to select from:\n  step 20: fsdp: missing trainer_state.pt"):
        select_checkpoint(list(candidates(tmp_path).values()), {"kind": "latest"}, [], None)


# --------------------------------------------------------------------------- pipeline steps

def step_context(tmp_path: Path, store_root: Path, *, rule: str = "", brk: str = "", job: str = "rl-swe"):
    from rlkeep.context import StepContext
    from rlkeep.records import load_record

    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    text = (f"job: {job}\nuser: benjaminfeuer\nscheduler: none\nchain:\n  - /benjaminfeuer/{job}\n  - /benjaminfeuer/{job}-r1\n"
            f"store: file://{store_root}\ncheckpoint:\n  interval: 20\n{rule}{brk}")
    (records / f"{job}.yaml").write_text(text)
    return StepContext(job=job, record=load_record(records / f"{job}.yaml"), data_root=tmp_path, inputs={}, outputs={})


def test_list_and_select_steps_on_a_file_store(run, tmp_path):
    hf_export(run, 60, where=".tmp-hf-export-zz99")
    ctx = step_context(tmp_path, run, rule="  rule:\n    kind: ema_max\n    metric: reward/avg_raw_reward\n    alpha: 0.3333\n")
    ctx.outputs = {"candidates": tmp_path / "rl-swe/checkpoint/candidates.json"}
    from rlkeep.checkpoints import list_checkpoints_step, select_checkpoint_step

    list_checkpoints_step(ctx)
    listing = json.loads(ctx.outputs["candidates"].read_text())
    assert listing["status"] == "completed" and listing["valid"] == [20, 40]
    assert [c["step"] for c in listing["candidates"]] == [20, 40, 60] and listing["latest_ckpt_global_step"] == 40
    metrics = tmp_path / "rl-swe/metrics/metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("global_step,attempt,reward/avg_raw_reward\n20,rl-swe,0.2\n40,rl-swe-r1,0.8\n")
    ctx.inputs = {"candidates": ctx.outputs["candidates"], "metrics": metrics}
    ctx.outputs = {"selected": tmp_path / "rl-swe/checkpoint/selected.json"}
    select_checkpoint_step(ctx)
    selected = json.loads(ctx.outputs["selected"].read_text())
    assert selected["step"] == 40 and selected["status"] == "completed"
    assert selected["ema"] == {"20": 0.2, "40": pytest.approx(0.4, abs=1e-3)}
    assert selected["keys"]["hf_export"] == sorted(selected["keys"]["hf_export"])
    assert "exports/global_step_40/policy/model.safetensors.index.json" in selected["keys"]["hf_export"]


def test_select_step_without_a_rule_is_blocked(run, tmp_path):
    from rlkeep.checkpoints import list_checkpoints_step, select_checkpoint_step

    ctx = step_context(tmp_path, run, brk="  behavior_break_step: 40\n")
    ctx.outputs = {"candidates": tmp_path / "candidates.json"}
    list_checkpoints_step(ctx)
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("global_step,attempt,reward/avg_raw_reward\n20,rl-swe,0.2\n")
    ctx.inputs = {"candidates": tmp_path / "candidates.json", "metrics": metrics}
    ctx.outputs = {"selected": tmp_path / "selected.json"}
    with pytest.raises(BlockedError, match=r"step 20: fsdp, hf_export\n  step 40: fsdp, hf_export \(not eligible"):
        select_checkpoint_step(ctx)
    assert not ctx.outputs["selected"].exists()


@pytest.mark.parametrize("kind", ["ema_max", "latest"])
def test_declared_warm_up_makes_earlier_candidates_ineligible(kind):
    rows = surface_rows({20: 0.9, 40: 0.1, 60: 0.2})
    rule = {**(EMA_RULE if kind == "ema_max" else {"kind": "latest"}), "min_step": 40}
    selected = select_checkpoint([make(20), make(40), make(60)], rule, rows, None)
    # without the warm-up, ema_max would pick step 20 (EMA 0.9 then falling)
    assert selected["step"] == (40 if kind == "ema_max" else 60)
    assert selected["rule"]["min_step"] == 40
    assert selected["warm_up"] == {"min_step": 40, "excluded": [20]}
    by_step = {entry["step"]: entry for entry in selected["candidates_considered"]}
    assert by_step[20]["eligible"] is False
    assert by_step[20]["not_eligible"] == "before the declared warm-up (checkpoint.rule.min_step 40)"
    assert by_step[40]["eligible"] and "not_eligible" not in by_step[40]
    assert "checkpoints before it are not eligible (20)" in selected["rationale"]


def test_no_warm_up_unless_declared():
    selected = select_checkpoint([make(20), make(40)], EMA_RULE, surface_rows({20: 0.9, 40: 0.1}), None)
    assert selected["step"] == 20 and selected["warm_up"] is None
    assert all(entry["eligible"] for entry in selected["candidates_considered"])


def test_warm_up_leaving_nothing_or_excluding_the_declared_step_is_a_clear_error():
    with pytest.raises(RlkeepError, match=r"no complete checkpoint at or after the declared warm-up checkpoint.rule."
                                          r"min_step 100; complete checkpoints:\n  step 20: fsdp \(not eligible: before "
                                          r"the declared warm-up"):
        select_checkpoint([make(20), make(40)], {"kind": "latest", "min_step": 100}, [], None)
    with pytest.raises(RlkeepError, match=r"checkpoint.rule.step 20 is before the declared warm-up checkpoint.rule.min_step 40"):
        select_checkpoint([make(20), make(40)], {"kind": "step", "step": 20, "min_step": 40}, [], None)
    with pytest.raises(RlkeepError, match=r"checkpoint.rule.min_step must be a step number >= 1"):
        select_checkpoint([make(20)], {"kind": "latest", "min_step": "40"}, [], None)
