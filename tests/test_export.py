"""Export: format detection, consolidation to a flat model, verification (rlkeep.export).

Every checkpoint here is real: safetensors written by the safetensors library, FSDP rank files
torch.saved by two gloo ranks on 127.0.0.1 from a module sharded with FSDP2's fully_shard, a
Megatron dist-checkpoint written by torch.distributed.checkpoint. Results are read back with the
safetensors library and compared tensor by tensor with the original state dict.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from rlkeep.errors import RlkeepError
from rlkeep.export import (
    Detection,
    choose_source,
    consolidate,
    detect_format,
    list_files,
    read_safetensors_header,
    verify_model,
)
from tests.support.checkpoints import (
    REPO,
    FsdpSpec,
    listing,
    load_safetensors_folder,
    rewrite_safetensors_header,
    tiny_config,
    tiny_state_dict,
    truncate,
    write_deepspeed_checkpoint,
    write_fsdp_checkpoint,
    write_fsdp_checkpoints,
    write_hf_export,
    write_megatron_checkpoint,
    write_tokenizer_and_config,
)

STATE = tiny_state_dict(0)
# Norms in float32 beside bfloat16 matrices: the output must keep both (no silent cast).
MIXED = tiny_state_dict(1, norm_dtype=torch.float32)
QWEN2_CONFIG = tiny_config("Qwen2ForCausalLM")
QWEN2 = tiny_state_dict(2, config=QWEN2_CONFIG)


def assert_same_tensors(folder: Path, state: dict[str, torch.Tensor]) -> None:
    loaded = load_safetensors_folder(folder)
    assert sorted(loaded) == sorted(state)
    for name, tensor in state.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name], tensor), name


def assert_nothing_left(dst: Path) -> None:
    assert not dst.exists()
    leftovers = [p.name for p in dst.parent.iterdir() if p.name.startswith(f".{dst.name}.tmp-")]
    assert leftovers == []


def consolidate_fails(src: Path, dst: Path, **kwargs) -> str:
    with pytest.raises(RlkeepError) as caught:
        consolidate(src, dst, **kwargs)
    assert_nothing_left(dst)
    return str(caught.value)


@pytest.fixture(scope="module")
def fsdp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real SkyRL FSDP2 checkpoints from one 2-rank gloo world: a normal one and one with a
    Partial placement."""
    root = tmp_path_factory.mktemp("fsdp")
    write_fsdp_checkpoints([
        FsdpSpec(root / "dtensor" / "global_step_20", MIXED),
        FsdpSpec(root / "partial" / "global_step_20", STATE, partial_keys=["model.norm.weight"]),
    ], world_size=2)
    return root


def copy_of(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "src" / source.name
    shutil.copytree(source, target)
    return target


# ------------------------------------------------------------------------------------ detection

def test_detect_single_safetensors_export(tmp_path: Path) -> None:
    export = write_hf_export(tmp_path / "policy", STATE)
    detection = detect_format(listing(export))
    assert (detection.format, detection.root, detection.consolidatable) == ("hf-single", "", True)
    assert detection.evidence[0].startswith("model.safetensors (")
    assert detection.needed_files == sorted(listing(export))


@pytest.mark.parametrize("nest", ["policy", "huggingface"])
@pytest.mark.parametrize("shards", [1, 3])
def test_detect_nested_export_names_its_root_and_files(tmp_path: Path, nest: str, shards: int) -> None:
    write_hf_export(tmp_path / "step" / nest, STATE, shards=shards)
    detection = detect_format(listing(tmp_path / "step"))
    assert detection.format == ("hf-single" if shards == 1 else "hf-sharded")
    assert detection.root == nest and detection.consolidatable
    assert all(path.startswith(f"{nest}/") for path in detection.needed_files)
    weights = [p for p in detection.needed_files if p.endswith(".safetensors")]
    assert len(weights) == shards
    if shards > 1:
        assert f"{nest}/model.safetensors.index.json" in detection.needed_files


def test_detect_works_on_a_store_listing_without_files() -> None:
    keys = {"policy/model-00001-of-00002.safetensors": 4_000_000_000,
            "policy/model-00002-of-00002.safetensors": 1_000_000_000,
            "policy/model.safetensors.index.json": 30_000, "policy/config.json": 700,
            "policy/tokenizer.json": 11_000_000, "policy/tokenizer_config.json": 5_000,
            "policy/generation_config.json": 200}
    detection = detect_format(keys)
    assert detection.format == "hf-sharded" and detection.consolidatable
    assert detection.needed_files == sorted(keys)


def test_detect_ignores_interrupted_export_siblings(tmp_path: Path) -> None:
    step = tmp_path / "global_step_40"
    write_hf_export(step / "policy", STATE)
    write_hf_export(step / ".tmp-hf-export-x1y2", STATE)
    detection = detect_format(listing(step))
    assert detection.root == "policy" and detection.consolidatable
    assert not any(".tmp-hf-export-" in p for p in detection.needed_files)
    assert any("ignored .tmp-hf-export-x1y2/" in e for e in detection.evidence)

    shutil.rmtree(step / "policy")
    alone = detect_format(listing(step))
    assert alone.format == "unknown" and not alone.consolidatable


def test_detect_incomplete_sharded_export_names_the_missing_shard(tmp_path: Path) -> None:
    export = write_hf_export(tmp_path / "policy", STATE, shards=3)
    (export / "model-00002-of-00003.safetensors").unlink()
    detection = detect_format(listing(export))
    assert detection.format == "hf-sharded" and not detection.consolidatable
    assert "model-00002-of-00003.safetensors" in detection.reason


def test_detect_fsdp_needs_only_model_shards_config_and_tokenizer(fsdp_dir: Path) -> None:
    step = fsdp_dir / "dtensor" / "global_step_20"
    files = listing(step)
    assert "policy/optim_world_size_2_rank_0.pt" in files and "data.pt" in files
    detection = detect_format(files)
    assert (detection.format, detection.root, detection.consolidatable) == ("fsdp", "policy", True)
    assert detection.needed_files == [
        "policy/fsdp_config.json", "policy/huggingface/config.json", "policy/huggingface/generation_config.json",
        "policy/huggingface/tokenizer.json", "policy/huggingface/tokenizer_config.json",
        "policy/model_world_size_2_rank_0.pt", "policy/model_world_size_2_rank_1.pt"]
    assert any("fsdp_config.json" in e for e in detection.evidence)


def test_detect_fsdp_with_a_missing_rank_or_mixed_world_sizes(tmp_path: Path) -> None:
    base = {"policy/fsdp_config.json": 50, "policy/huggingface/config.json": 700,
            "policy/huggingface/tokenizer.json": 3000, "trainer_state.pt": 900}
    ranks = {f"policy/model_world_size_4_rank_{r}.pt": 10_000 for r in (0, 1, 3)}
    missing = detect_format(base | ranks)
    assert missing.format == "fsdp" and not missing.consolidatable
    assert "policy/model_world_size_4_rank_2.pt" in missing.reason

    mixed = detect_format(base | ranks | {"policy/model_world_size_2_rank_0.pt": 1,
                                          "policy/model_world_size_4_rank_2.pt": 1})
    assert not mixed.consolidatable and "several world sizes [2, 4]" in mixed.reason


def test_detect_fsdp_before_pr_124_has_no_config_to_export_with() -> None:
    files = {"policy/model_world_size_2_rank_0.pt": 10, "policy/model_world_size_2_rank_1.pt": 10,
             "policy/optim_world_size_2_rank_0.pt": 10, "trainer_state.pt": 10}
    detection = detect_format(files)
    assert detection.format == "fsdp" and not detection.consolidatable
    assert "policy/huggingface/config.json" in detection.reason and "#124" in detection.reason


def test_detect_fsdp_lora_run_is_refused() -> None:
    files = {"policy/model_world_size_1_rank_0.pt": 10, "policy/fsdp_config.json": 10,
             "policy/huggingface/config.json": 10, "policy/huggingface/tokenizer.json": 10,
             "policy/lora_adapter/adapter_model.safetensors": 10}
    detection = detect_format(files)
    assert not detection.consolidatable and "LoRA" in detection.reason


def test_detect_megatron_and_deepspeed_are_refused_with_the_export_job(tmp_path: Path) -> None:
    megatron = detect_format(listing(write_megatron_checkpoint(tmp_path / "megatron" / "global_step_20")))
    assert (megatron.format, megatron.root, megatron.consolidatable) == ("megatron", "policy", False)
    assert "policy/metadata.json" in megatron.evidence and any(".distcp" in e for e in megatron.evidence)
    assert "export job" in megatron.reason and megatron.needed_files == []

    deepspeed = detect_format(listing(write_deepspeed_checkpoint(tmp_path / "ds" / "global_step_20", STATE)))
    assert (deepspeed.format, deepspeed.root, deepspeed.consolidatable) == ("deepspeed", "policy", False)
    assert "policy/latest" in deepspeed.evidence and "zero_to_fp32.py" in deepspeed.reason
    assert "export job" in deepspeed.reason and deepspeed.needed_files == []


def test_choose_source_prefers_a_complete_export(tmp_path: Path, fsdp_dir: Path) -> None:
    export = write_hf_export(tmp_path / "exports" / "global_step_20" / "policy", STATE, shards=2).parent
    ckpt = fsdp_dir / "dtensor" / "global_step_20"
    chosen = choose_source(listing(export), listing(ckpt))
    assert (chosen.source, chosen.format, chosen.root) == ("export", "hf-sharded", "policy")


def test_choose_source_falls_back_to_the_checkpoint_with_the_reason(tmp_path: Path, fsdp_dir: Path) -> None:
    export = write_hf_export(tmp_path / "exports" / "global_step_20" / "policy", STATE, write_config=False).parent
    ckpt = listing(fsdp_dir / "dtensor" / "global_step_20")
    chosen = choose_source(listing(export), ckpt)
    assert (chosen.source, chosen.format, chosen.consolidatable) == ("ckpt", "fsdp", True)
    assert any("export not used" in e and "config.json" in e for e in chosen.evidence)
    assert choose_source(None, ckpt).evidence[-1] == "no export of this step"
    only_export = choose_source(listing(export), None)
    assert only_export.source == "export" and not only_export.consolidatable
    assert not choose_source(None, None).consolidatable


# ------------------------------------------------------------------------------------ consolidation

def test_consolidate_flat_single_file_reuses_it_and_reports_provenance(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", MIXED)
    dst = tmp_path / "model"
    report = consolidate(src, dst)
    assert_same_tensors(dst, MIXED)
    assert report["status"] == "completed" and report["format"] == "hf-single"
    assert report["output"]["reused_whole"] == [f"model.safetensors <- {src / 'model.safetensors'}"]
    assert (dst / "model.safetensors").stat().st_ino == (src / "model.safetensors").stat().st_ino  # hard link
    assert sorted(p.name for p in dst.iterdir()) == sorted(p.name for p in src.iterdir())
    assert [f["path"] for f in report["source"]["files"]] == sorted(listing(src))
    for entry in report["files"]:
        data = (dst / entry["path"]).read_bytes()
        assert entry["size"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert report["parameter_count"] == sum(t.numel() for t in MIXED.values())
    names = {torch.bfloat16: "BF16", torch.float32: "F32"}
    dtypes = [names[t.dtype] for t in MIXED.values()]
    assert report["verification"]["dtypes"] == {d: dtypes.count(d) for d in set(dtypes)} and len(set(dtypes)) == 2
    assert report["verification"]["architectures"] == ["Qwen3ForCausalLM"]


def test_consolidate_sharded_export_keeps_its_shards_linked_whole(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", QWEN2, shards=3, config=QWEN2_CONFIG)
    dst = tmp_path / "model"
    report = consolidate(src, dst)
    assert_same_tensors(dst, QWEN2)
    names = [f"model-{k:05d}-of-00003.safetensors" for k in (1, 2, 3)]
    assert report["output"]["weights"] == names and report["output"]["sharded"]
    assert report["output"]["reused_whole"] == [f"{name} <- {src / name}" for name in names]
    for name in names:  # never rewritten: the published shards hash the same as the training export's
        assert (dst / name).stat().st_ino == (src / name).stat().st_ino
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    assert report["verification"]["architectures"] == ["Qwen2ForCausalLM"]


def test_consolidate_repacks_a_sharded_export_whose_shard_exceeds_the_limit(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", QWEN2, shards=3, config=QWEN2_CONFIG)
    largest = max(read_safetensors_header(path).data_bytes for path in src.glob("*.safetensors"))
    dst = tmp_path / "model"
    report = consolidate(src, dst, max_shard_bytes=largest - 1)
    assert_same_tensors(dst, QWEN2)
    assert report["output"]["reused_whole"] == []
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == report["output"]["weights"]
    for shard in report["output"]["weights"]:
        assert (dst / shard).stat().st_nlink == 1  # rewritten under a new header, not linked


def test_consolidate_reshards_with_a_transformers_index(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE)
    dst = tmp_path / "model"
    report = consolidate(src, dst, max_shard_bytes=3000)
    assert_same_tensors(dst, STATE)
    index_text = (dst / "model.safetensors.index.json").read_text()
    index = json.loads(index_text)
    assert index_text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    data_bytes = sum(t.numel() * t.element_size() for t in STATE.values())
    assert index["metadata"]["total_size"] == data_bytes == report["total_size"]
    assert list(index["weight_map"]) == sorted(STATE)
    shards = report["output"]["weights"]
    assert len(shards) > 1 and shards == sorted(set(index["weight_map"].values()))
    for shard in shards:
        header = read_safetensors_header(dst / shard)
        assert {e.name for e in header.tensors} == {n for n, s in index["weight_map"].items() if s == shard}
        assert header.data_bytes <= 3000 or len(header.tensors) == 1


@pytest.fixture
def other_filesystem(tmp_path: Path):
    """A directory on another filesystem than tmp_path (tmpfs), where copy_file_range and
    hard links are refused with EXDEV."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    directory = Path(tempfile.mkdtemp(prefix="rlkeep-export-test-", dir=shm))
    yield directory
    shutil.rmtree(directory)


@pytest.mark.parametrize("shards", [1, 2])
def test_consolidate_across_filesystems_falls_back_to_plain_copies(tmp_path: Path, other_filesystem: Path,
                                                                   shards: int) -> None:
    src = write_hf_export(other_filesystem / "policy", STATE, shards=shards)
    dst = tmp_path / "model"
    report = consolidate(src, dst)
    assert_same_tensors(dst, STATE)
    assert len(report["output"]["reused_whole"]) == shards
    for name in report["output"]["weights"]:
        assert (dst / name).stat().st_nlink == 1  # a copy: no link can cross filesystems
    for entry in report["files"]:
        assert entry["sha256"] == hashlib.sha256((dst / entry["path"]).read_bytes()).hexdigest()


@pytest.mark.parametrize("nest", ["policy", "huggingface"])
def test_consolidate_flattens_nested_weights(tmp_path: Path, nest: str) -> None:
    step = tmp_path / "global_step_20"
    write_hf_export(step / nest, STATE, shards=2)
    dst = tmp_path / "model"
    report = consolidate(step, dst)
    assert_same_tensors(dst, STATE)
    assert all(p.is_file() for p in dst.iterdir())  # nothing nested
    assert report["source"]["root"] == nest
    assert (dst / "tokenizer.json").read_bytes() == (step / nest / "tokenizer.json").read_bytes()


def test_fsdp_builder_writes_dtensor_shard0_pieces(fsdp_dir: Path) -> None:
    from torch.distributed.tensor import DTensor, Shard

    policy = fsdp_dir / "dtensor" / "global_step_20" / "policy"
    rows = 0
    for rank in (0, 1):
        state = torch.load(policy / f"model_world_size_2_rank_{rank}.pt", weights_only=False)
        embed = state["model.embed_tokens.weight"]
        assert isinstance(embed, DTensor) and embed.placements == (Shard(0),)
        rows += embed.to_local().shape[0]
    assert rows == MIXED["model.embed_tokens.weight"].shape[0] == 67  # uneven: 34 + 33
    assert json.loads((policy / "fsdp_config.json").read_text()) == {"fsdp_strategy": "fsdp", "world_size": 2}


def test_consolidate_fsdp_dtensor_shards(fsdp_dir: Path, tmp_path: Path) -> None:
    step = fsdp_dir / "dtensor" / "global_step_20"
    dst = tmp_path / "model"
    report = consolidate(step, dst, detection=detect_format(listing(step)))
    assert_same_tensors(dst, MIXED)
    assert report["format"] == "fsdp"
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json"]
    assert "policy/optim_world_size_2_rank_0.pt" not in [f["path"] for f in report["source"]["files"]]
    assert "all 25 tensor names, dtypes and shapes match the source" in report["verification"]["checks"]


def test_consolidate_fsdp_plain_tensor_shards_into_shards(tmp_path: Path) -> None:
    step = write_fsdp_checkpoint(tmp_path / "global_step_20", QWEN2, dtensor=False, config=QWEN2_CONFIG)
    dst = tmp_path / "model"
    report = consolidate(step, dst, max_shard_bytes=4000)
    assert_same_tensors(dst, QWEN2)
    assert report["output"]["sharded"] and (dst / "model.safetensors.index.json").is_file()


def test_consolidate_fsdp_partial_placement_fails(fsdp_dir: Path, tmp_path: Path) -> None:
    message = consolidate_fails(fsdp_dir / "partial" / "global_step_20", tmp_path / "model")
    assert "model_world_size_2_rank_0.pt: tensor 'model.norm.weight'" in message and "Partial" in message


def test_consolidate_fsdp_lora_tensors_fail(tmp_path: Path) -> None:
    state = dict(STATE)
    state["model.layers.0.self_attn.q_proj.lora_A.weight"] = torch.zeros(4, 16, dtype=torch.bfloat16)
    step = write_fsdp_checkpoint(tmp_path / "global_step_20", state, dtensor=False)
    message = consolidate_fails(step, tmp_path / "model")
    assert "LoRA tensors" in message and "lora_A" in message


def test_consolidate_fsdp_rank_count_not_world_size_fails(fsdp_dir: Path, tmp_path: Path) -> None:
    step = copy_of(fsdp_dir / "dtensor" / "global_step_20", tmp_path)
    (step / "policy" / "fsdp_config.json").write_text(json.dumps({"fsdp_strategy": "fsdp", "world_size": 4}))
    message = consolidate_fails(step, tmp_path / "model")
    assert "fsdp_config.json: world_size 4 but 2 rank file(s)" in message


def test_consolidate_fsdp_missing_rank_file_fails(fsdp_dir: Path, tmp_path: Path) -> None:
    step = copy_of(fsdp_dir / "dtensor" / "global_step_20", tmp_path)
    stale = detect_format(listing(step))  # e.g. from the store listing, before a download lost a file
    (step / "policy" / "model_world_size_2_rank_1.pt").unlink()
    message = consolidate_fails(step, tmp_path / "model", detection=stale)
    assert "policy/model_world_size_2_rank_1.pt" in message and "missing" in message
    message = consolidate_fails(step, tmp_path / "model")
    assert "missing rank file(s) policy/model_world_size_2_rank_1.pt" in message


def test_consolidate_fsdp_truncated_rank_file_fails(fsdp_dir: Path, tmp_path: Path) -> None:
    step = copy_of(fsdp_dir / "dtensor" / "global_step_20", tmp_path)
    truncate(step / "policy" / "model_world_size_2_rank_1.pt", 2000)
    message = consolidate_fails(step, tmp_path / "model")
    assert "model_world_size_2_rank_1.pt: torch.load failed" in message


def test_consolidate_fsdp_without_torch_says_how_to_install(fsdp_dir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` meets without the extra
    message = consolidate_fails(fsdp_dir / "dtensor" / "global_step_20", tmp_path / "model")
    assert "pip install -e .[torch]" in message


def test_consolidate_refuses_megatron_and_deepspeed(tmp_path: Path) -> None:
    megatron = write_megatron_checkpoint(tmp_path / "megatron")
    message = consolidate_fails(megatron, tmp_path / "model")
    assert "megatron checkpoint cannot be consolidated here" in message and "export job" in message
    deepspeed = write_deepspeed_checkpoint(tmp_path / "ds", STATE)
    message = consolidate_fails(deepspeed, tmp_path / "model")
    assert "deepspeed checkpoint cannot be consolidated here" in message and "zero_to_fp32.py" in message


def test_consolidate_truncated_shard_fails(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE, shards=2)
    truncate(src / "model-00002-of-00002.safetensors", 100)
    message = consolidate_fails(src, tmp_path / "model")
    assert "model-00002-of-00002.safetensors: MetadataIncompleteBuffer" in message and "truncated" in message


@pytest.mark.parametrize("lie", ["overlap", "past_end"])
def test_consolidate_header_lying_about_offsets_fails(tmp_path: Path, lie: str) -> None:
    src = write_hf_export(tmp_path / "policy", STATE)

    def edit(header: dict) -> None:
        entries = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
        first, last = header[entries[0]], header[entries[-1]]
        if lie == "overlap":
            size = first["data_offsets"][1] - first["data_offsets"][0]
            last["data_offsets"] = [first["data_offsets"][0], first["data_offsets"][0] + size]
            last["shape"], last["dtype"] = first["shape"], first["dtype"]
        else:
            last["data_offsets"] = [o + 4096 for o in last["data_offsets"]]

    rewrite_safetensors_header(src / "model.safetensors", edit)
    message = consolidate_fails(src, tmp_path / "model")
    assert "model.safetensors: InvalidOffset" in message


def test_consolidate_shard_named_by_index_but_missing_fails(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE, shards=2)
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["lm_head.weight"] = "model-00003-of-00003.safetensors"
    index_path.write_text(json.dumps(index))
    message = consolidate_fails(src, tmp_path / "model")
    assert "model-00003-of-00003.safetensors: shard named by" in message and "is missing" in message


def test_consolidate_tensor_absent_from_its_shard_fails(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE, shards=2)
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    message = consolidate_fails(src, tmp_path / "model")
    assert "model.safetensors.index.json" in message and "'model.ghost.weight'" in message


@pytest.mark.parametrize("missing", ["tokenizer", "config"])
def test_consolidate_without_tokenizer_or_config_fails(tmp_path: Path, missing: str) -> None:
    src = write_hf_export(tmp_path / "policy", STATE)
    stale = detect_format(listing(src))
    name = "tokenizer.json" if missing == "tokenizer" else "config.json"
    (src / name).unlink()
    message = consolidate_fails(src, tmp_path / "model")
    assert f"{src}: hf-single checkpoint cannot be consolidated here" in message
    assert ("no tokenizer in ./" if missing == "tokenizer" else "no config.json") in message
    # with a detection made before the file went missing (a store listing), the download check names it
    message = consolidate_fails(src, tmp_path / "model", detection=stale)
    assert f"needed file(s) missing (download them first): '{name}'" in message


def test_consolidate_names_a_bad_source_config_or_tokenizer_file(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE)
    config = json.loads((src / "config.json").read_text())
    config["architectures"] = []
    (src / "config.json").write_text(json.dumps(config))
    (src / "tokenizer_config.json").write_text("{not json")
    message = consolidate_fails(src, tmp_path / "model")
    assert f"{src / 'config.json'}: field 'architectures' must be a non-empty list" in message
    assert f"{src / 'tokenizer_config.json'}: not valid JSON" in message


def test_consolidate_fsdp_without_huggingface_config_fails(fsdp_dir: Path, tmp_path: Path) -> None:
    step = copy_of(fsdp_dir / "dtensor" / "global_step_20", tmp_path)
    (step / "policy" / "huggingface" / "config.json").unlink()
    message = consolidate_fails(step, tmp_path / "model")
    assert "policy/huggingface/config.json" in message


def test_consolidate_never_overwrites_an_existing_destination(tmp_path: Path) -> None:
    src = write_hf_export(tmp_path / "policy", STATE)
    dst = tmp_path / "model"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    with pytest.raises(RlkeepError, match="already exists and is not empty"):
        consolidate(src, dst)
    assert (dst / "keep.txt").read_text() == "mine"
    (dst / "keep.txt").unlink()
    consolidate(src, dst)  # an empty directory is taken over
    assert_same_tensors(dst, STATE)


# ------------------------------------------------------------------------------------ verification

@pytest.fixture
def flat_sharded(tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    consolidate(write_hf_export(tmp_path / "policy", STATE), dst, max_shard_bytes=3000)
    return dst


def verify_fails(model_dir: Path, **kwargs) -> str:
    with pytest.raises(RlkeepError) as caught:
        verify_model(model_dir, **kwargs)
    return str(caught.value)


def test_verify_reports_hashes_sizes_and_parameter_count(flat_sharded: Path) -> None:
    report = verify_model(flat_sharded, expected={n: ("BF16", tuple(t.shape)) for n, t in STATE.items()})
    assert report["parameter_count"] == sum(t.numel() for t in STATE.values())
    assert report["tensor_count"] == len(STATE) and report["sharded"]
    on_disk = sorted(p.name for p in flat_sharded.iterdir())
    assert [f["path"] for f in report["files"]] == on_disk
    for entry in report["files"]:
        data = (flat_sharded / entry["path"]).read_bytes()
        assert (entry["size"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())


def test_verify_accepts_torch_dtypes_as_expected(flat_sharded: Path) -> None:
    expected = {n: (t.dtype, tuple(t.shape)) for n, t in STATE.items()}
    assert verify_model(flat_sharded, expected=expected)["compared_with_source"]
    expected["model.norm.weight"] = (torch.float32, (16,))
    assert "model.norm.weight is BF16[16], source F32[16]" in verify_fails(flat_sharded, expected=expected)


def test_verify_rejects_nested_weights(tmp_path: Path) -> None:
    intermediate = tmp_path / "pushed"
    write_hf_export(intermediate / "policy", STATE)
    message = verify_fails(intermediate)
    assert "no top-level weights" in message and "nested under policy/" in message


def test_verify_detects_total_size_written_as_parameter_count(flat_sharded: Path) -> None:
    index_path = flat_sharded / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["total_size"] = sum(t.numel() for t in STATE.values())
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True))
    message = verify_fails(flat_sharded)
    assert "total_size" in message and "parameter count" in message and "verl" in message


def test_verify_detects_a_tensor_duplicated_across_shards(tmp_path: Path) -> None:
    model = write_hf_export(tmp_path / "model", STATE, shards=2)
    rewrite_safetensors_header(model / "model-00002-of-00002.safetensors",
                               lambda header: header.__setitem__("model.embed_tokens.weight",
                                                                 header.pop("lm_head.weight")))
    message = verify_fails(model)
    assert "'model.embed_tokens.weight' is also in" in message and "duplicated across shards" in message


def test_verify_missing_shard_and_stray_shard(flat_sharded: Path) -> None:
    shards = sorted(flat_sharded.glob("model-*.safetensors"))
    shards[-1].rename(flat_sharded / "model-00099-of-00099.safetensors")
    message = verify_fails(flat_sharded)
    assert f"{shards[-1].name}: shard named by the index is missing" in message
    assert "not named by the index" in message and "model-00099-of-00099.safetensors" in message


def test_verify_compares_with_the_source(flat_sharded: Path) -> None:
    expected = {n: ("BF16", tuple(t.shape)) for n, t in STATE.items()}
    expected["model.norm.weight"] = ("F32", (16,))
    expected["model.layers.0.mlp.up_proj.weight"] = ("BF16", (16, 24))
    expected["model.extra.weight"] = ("BF16", (1,))
    del expected["lm_head.weight"]
    message = verify_fails(flat_sharded, expected=expected)
    assert "model.norm.weight is BF16[16], source F32[16]" in message
    assert "model.layers.0.mlp.up_proj.weight is BF16[24, 16], source BF16[16, 24]" in message
    assert "missing from the model: 'model.extra.weight'" in message
    assert "not in the source: 'lm_head.weight'" in message


def test_verify_lists_every_problem_at_once(tmp_path: Path) -> None:
    model = write_hf_export(tmp_path / "model", STATE)
    (model / "tokenizer.json").unlink()
    config = json.loads((model / "config.json").read_text())
    del config["architectures"]
    (model / "config.json").write_text(json.dumps(config))
    truncate(model / "model.safetensors", 8)
    message = verify_fails(model)
    assert "(3 problems)" in message
    assert "MetadataIncompleteBuffer" in message
    assert "config.json: field 'architectures'" in message
    assert "no tokenizer" in message


# ------------------------------------------------------------------------------------ CLI

def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkeep", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_cli_consolidate_and_verify_print_json_reports(tmp_path: Path) -> None:
    step = tmp_path / "global_step_20"
    write_hf_export(step / "policy", STATE, shards=2)
    dst = tmp_path / "model"
    done = run_cli("consolidate", str(step), str(dst))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "hf-sharded" and report["output"]["dir"] == str(dst)
    assert_same_tensors(dst, STATE)

    verified = run_cli("verify-model", str(dst))
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["files"] == report["files"]

    inspected = run_cli("consolidate", "--inspect", str(step))
    assert Detection(**json.loads(inspected.stdout)).root == "policy"

    refused = run_cli("verify-model", str(step))
    assert refused.returncode == 1 and refused.stderr.startswith("rlkeep: ")
    assert "nested under policy/" in refused.stderr
    again = run_cli("consolidate", str(step), str(dst))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_list_files_matches_the_tree(tmp_path: Path) -> None:
    write_tokenizer_and_config(tmp_path / "a" / "b")
    assert list_files(tmp_path) == listing(tmp_path)
    with pytest.raises(RlkeepError, match="not a directory"):
        list_files(tmp_path / "nope")


def test_consolidate_refuses_up_front_when_the_model_will_not_fit(tmp_path: Path, monkeypatch) -> None:
    """Found by CI (disk full): consolidation filled the disk mid-write. It now counts what it will write
    (rewritten shards with their headers, the config and tokenizer; shards linked whole cost nothing)
    and refuses before writing, naming the need."""
    import rlkeep.diskspace

    src = write_hf_export(tmp_path / "policy", QWEN2, shards=3, config=QWEN2_CONFIG)
    largest = max(read_safetensors_header(path).data_bytes for path in src.glob("*.safetensors"))
    tensor_bytes = sum(read_safetensors_header(path).data_bytes for path in src.glob("*.safetensors"))
    monkeypatch.setattr(rlkeep.diskspace, "free_bytes", lambda path: 0)

    def needed(said: str) -> int:
        assert "consolidation of" in said and "nothing was written" in said, said
        return int(said.split("needs ")[1].split(" bytes")[0].replace(",", ""))

    rewritten = needed(consolidate_fails(src, tmp_path / "model", max_shard_bytes=largest - 1))
    linked = needed(consolidate_fails(src, tmp_path / "model"))
    assert rewritten - linked >= tensor_bytes, (rewritten, linked, tensor_bytes)
