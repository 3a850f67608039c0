"""Builders of real checkpoints of every layout rlkeep's export reads, from a tiny Qwen-like model.

Everything here writes real files the way the producing tool does (docs/reference.md, formats §1):
- ``write_hf_export``: transformers/SkyRL HF export (``model.safetensors`` or shards + index).
- ``write_fsdp_checkpoint(s)``: SkyRL FSDP2 ``policy/model_world_size_W_rank_R.pt``: W processes
  joined by torch.distributed (gloo on 127.0.0.1) shard a module with ``fully_shard`` and
  ``torch.save`` their ``state_dict()`` of DTensor Shard(0) pieces; or plain-tensor rank shards.
- ``write_megatron_checkpoint``: a torch_dist dist-checkpoint written by torch.distributed.checkpoint.
- ``write_deepspeed_checkpoint``: the legacy DeepSpeed ZeRO layout.
Corruption helpers (``truncate``, ``rewrite_safetensors_header``) damage files like real failures do.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

__all__ = ["FsdpSpec", "REPO", "listing", "load_safetensors_folder", "rewrite_safetensors_header",
           "tiny_config", "tiny_state_dict", "truncate", "write_deepspeed_checkpoint", "write_fsdp_checkpoint",
           "write_fsdp_checkpoints", "write_hf_export", "write_megatron_checkpoint", "write_tokenizer_and_config"]


# ---------------------------------------------------------------------------- tiny model

def tiny_config(architecture: str = "Qwen3ForCausalLM", *, hidden_size: int = 16, layers: int = 2,
                vocab_size: int = 67, heads: int = 2, kv_heads: int = 1, head_dim: int = 8,
                intermediate_size: int = 24, tie_word_embeddings: bool = False) -> dict[str, Any]:
    """A config.json as transformers writes it for Qwen3 / Qwen2 causal LMs, only tiny."""
    if architecture not in ("Qwen3ForCausalLM", "Qwen2ForCausalLM"):
        raise ValueError(f"tiny_config builds Qwen3ForCausalLM or Qwen2ForCausalLM, not {architecture}")
    qwen3 = architecture == "Qwen3ForCausalLM"
    config: dict[str, Any] = {
        "architectures": [architecture],
        "attention_dropout": 0.0,
        "bos_token_id": vocab_size - 3,
        "eos_token_id": vocab_size - 1,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": 256,
        "max_window_layers": layers,
        "model_type": "qwen3" if qwen3 else "qwen2",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": tie_word_embeddings,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.3",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }
    if qwen3:
        config.update({"attention_bias": False, "head_dim": head_dim})
    return config


def tiny_state_dict(seed: int = 0, *, config: Mapping[str, Any] | None = None, dtype: torch.dtype = torch.bfloat16,
                    norm_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The state dict of the tiny model of ``config`` with HF parameter names, random values.

    Row counts are chosen so FSDP shards are uneven (vocab 67 over 2 ranks: 34 + 33 rows).
    norm_dtype: give the norm weights another dtype (mixed-dtype checkpoints).
    """
    config = dict(config or tiny_config())
    generator = torch.Generator().manual_seed(seed)
    qwen3 = config["model_type"] == "qwen3"
    hidden, vocab, inter = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    q_rows, kv_rows = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim

    def weight(*shape: int, kind: torch.dtype = dtype) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.02).to(kind)

    def norm(size: int) -> torch.Tensor:
        return (1.0 + torch.randn(size, generator=generator) * 0.01).to(norm_dtype or dtype)

    state = {"model.embed_tokens.weight": weight(vocab, hidden)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        state[f"{prefix}.input_layernorm.weight"] = norm(hidden)
        state[f"{prefix}.self_attn.q_proj.weight"] = weight(q_rows, hidden)
        state[f"{prefix}.self_attn.k_proj.weight"] = weight(kv_rows, hidden)
        state[f"{prefix}.self_attn.v_proj.weight"] = weight(kv_rows, hidden)
        if qwen3:
            state[f"{prefix}.self_attn.q_norm.weight"] = norm(head_dim)
            state[f"{prefix}.self_attn.k_norm.weight"] = norm(head_dim)
        else:
            state[f"{prefix}.self_attn.q_proj.bias"] = weight(q_rows)
            state[f"{prefix}.self_attn.k_proj.bias"] = weight(kv_rows)
            state[f"{prefix}.self_attn.v_proj.bias"] = weight(kv_rows)
        state[f"{prefix}.self_attn.o_proj.weight"] = weight(hidden, q_rows)
        state[f"{prefix}.post_attention_layernorm.weight"] = norm(hidden)
        state[f"{prefix}.mlp.gate_proj.weight"] = weight(inter, hidden)
        state[f"{prefix}.mlp.up_proj.weight"] = weight(inter, hidden)
        state[f"{prefix}.mlp.down_proj.weight"] = weight(hidden, inter)
    state["model.norm.weight"] = norm(hidden)
    if not config.get("tie_word_embeddings"):
        state["lm_head.weight"] = weight(vocab, hidden)
    return state


def _tokenizer_json(vocab_size: int) -> dict[str, Any]:
    """A byte-level BPE tokenizer.json in the `tokenizers` serialization, with Qwen's specials."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    regular = vocab_size - len(specials)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = letters + ["Ġ", "Ċ"]
    pairs = iter(itertools.product(letters, repeat=2))
    merges = []
    while len(pieces) < regular:
        left, right = next(pairs)
        pieces.append(left + right)
        merges.append(f"{left} {right}")
    vocab = {piece: index for index, piece in enumerate(pieces[:regular])}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": regular + i, "content": token, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for i, token in enumerate(specials)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def write_tokenizer_and_config(directory: str | os.PathLike[str], *, config: Mapping[str, Any] | None = None,
                               tokenizer: bool = True, generation_config: bool = True,
                               write_config: bool = True) -> Path:
    """config.json, generation_config.json, tokenizer.json + tokenizer_config.json, as an HF export has."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = dict(config or tiny_config())
    vocab = config["vocab_size"]
    if write_config:
        _write_json(directory / "config.json", config)
    if generation_config:
        _write_json(directory / "generation_config.json", {
            "bos_token_id": config["bos_token_id"], "do_sample": True, "eos_token_id": [vocab - 1, vocab - 3],
            "pad_token_id": vocab - 3, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
            "transformers_version": config["transformers_version"]})
    if tokenizer:
        _write_json(directory / "tokenizer.json", _tokenizer_json(vocab))
        _write_json(directory / "tokenizer_config.json", {
            "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
            "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    return directory


def _write_json(path: Path, value: Any, indent: int = 2) -> None:
    path.write_text(json.dumps(value, indent=indent, sort_keys=True) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------- HF exports

def _split_in_order(state: Mapping[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    names = list(state)
    if not 1 <= parts <= len(names):
        raise ValueError(f"cannot split {len(names)} tensors into {parts} shards")
    bounds = [round(i * len(names) / parts) for i in range(parts + 1)]
    return [{n: state[n] for n in names[bounds[i]:bounds[i + 1]]} for i in range(parts)]


def write_hf_export(directory: str | os.PathLike[str], state: Mapping[str, torch.Tensor], *, shards: int = 1,
                    config: Mapping[str, Any] | None = None, tokenizer: bool = True,
                    generation_config: bool = True, write_config: bool = True) -> Path:
    """An HF export folder as save_pretrained writes it: one model.safetensors, or
    model-0000k-of-0000n.safetensors + model.safetensors.index.json (total_size in bytes)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_tokenizer_and_config(directory, config=config, tokenizer=tokenizer, generation_config=generation_config,
                               write_config=write_config)
    if shards == 1:
        save_file(dict(state), str(directory / "model.safetensors"), metadata={"format": "pt"})
        return directory
    weight_map: dict[str, str] = {}
    for number, part in enumerate(_split_in_order(state, shards), start=1):
        name = f"model-{number:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(directory / name), metadata={"format": "pt"})
        weight_map.update({tensor: name for tensor in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    _write_json(directory / "model.safetensors.index.json", {"metadata": {"total_size": total},
                                                              "weight_map": weight_map})
    return directory


# ---------------------------------------------------------------------------- SkyRL FSDP

@dataclass
class FsdpSpec:
    """One FSDP checkpoint to write: ``step_dir`` is ckpts/global_step_N."""

    step_dir: Path
    state: Mapping[str, torch.Tensor]
    partial_keys: Sequence[str] = ()  # tensors saved with a Partial placement (not FSDP: for error tests)
    config: Mapping[str, Any] | None = None
    global_step: int = 20


def write_fsdp_checkpoint(step_dir: str | os.PathLike[str], state: Mapping[str, torch.Tensor], *,
                          world_size: int = 2, dtensor: bool = True, partial_keys: Sequence[str] = (),
                          config: Mapping[str, Any] | None = None, global_step: int = 20) -> Path:
    """A SkyRL FSDP checkpoint step dir; dtensor=False writes plain-tensor rank shards (dim-0 chunks)."""
    spec = FsdpSpec(Path(step_dir), state, tuple(partial_keys), config, global_step)
    write_fsdp_checkpoints([spec], world_size=world_size, dtensor=dtensor)
    return Path(step_dir)


def write_fsdp_checkpoints(specs: Sequence[FsdpSpec], *, world_size: int = 2, dtensor: bool = True) -> None:
    """Write several FSDP checkpoints with one set of rank processes (spawning torch costs seconds)."""
    for spec in specs:
        _write_fsdp_common(spec, world_size)
    if not dtensor:
        for spec in specs:
            if spec.partial_keys:
                raise ValueError("Partial placements exist only for DTensors")
            for rank in range(world_size):
                shard = {name: _rank_rows(tensor, world_size, rank) for name, tensor in spec.state.items()}
                _save_rank_files(spec, world_size, rank, shard)
        return
    _spawn_ranks(specs, world_size)


def _rank_rows(tensor: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """The dim-0 rows a rank holds under FSDP's torch.chunk split (the last ranks may hold fewer, or none)."""
    rows = math.ceil(tensor.shape[0] / world_size)
    return tensor[min(rank * rows, tensor.shape[0]):min((rank + 1) * rows, tensor.shape[0])].clone()


def _write_fsdp_common(spec: FsdpSpec, world_size: int) -> None:
    policy = spec.step_dir / "policy"
    policy.mkdir(parents=True, exist_ok=True)
    (policy / "fsdp_config.json").write_text(json.dumps({"fsdp_strategy": "fsdp", "world_size": world_size},
                                                        indent=4), encoding="utf-8")
    write_tokenizer_and_config(policy / "huggingface", config=spec.config)
    torch.save({"global_step": spec.global_step, "config": {"trainer": {"strategy": "fsdp2"}}},
               spec.step_dir / "trainer_state.pt")
    torch.save({"consumed_samples": spec.global_step * 8, "epoch": 0}, spec.step_dir / "data.pt")


def _save_rank_files(spec: FsdpSpec, world_size: int, rank: int, model_state: Mapping[str, Any]) -> None:
    policy = spec.step_dir / "policy"
    torch.save(dict(model_state), policy / f"model_world_size_{world_size}_rank_{rank}.pt")
    torch.save({}, policy / f"optim_world_size_{world_size}_rank_{rank}.pt")
    torch.save({"lr_scheduler": {"last_epoch": spec.global_step}, "client_state": {"global_step": spec.global_step},
                "rng": {"cpu": torch.get_rng_state()}, "world_size": world_size, "rank": rank},
               policy / f"extra_state_world_size_{world_size}_rank_{rank}.pt")


def _spawn_ranks(specs: Sequence[FsdpSpec], world_size: int) -> None:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, world_size + 1, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory(prefix="rlkeep-fsdp-") as tmp:
        plan = Path(tmp) / "plan.pt"
        torch.save({"port": store.port, "world_size": world_size,
                    "specs": [{"step_dir": str(s.step_dir), "state": dict(s.state), "partial_keys": list(s.partial_keys),
                               "global_step": s.global_step} for s in specs]}, plan)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        code = "import sys; from tests.support.checkpoints import _rank_main; _rank_main(sys.argv[1], int(sys.argv[2]))"
        ranks = [subprocess.Popen([sys.executable, "-c", code, str(plan), str(rank)], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(world_size)]
        try:
            outputs = [proc.communicate(timeout=300)[0] for proc in ranks]
        finally:  # a rank that died leaves the others waiting in a collective: stop them
            for proc in ranks:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    failed = [(rank, out) for rank, (proc, out) in enumerate(zip(ranks, outputs)) if proc.returncode != 0]
    if failed:
        raise RuntimeError("FSDP rank process failed:\n" + "\n".join(f"rank {r}:\n{out}" for r, out in failed))


def _module_with(state: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """A module tree whose parameters carry exactly the names of ``state``."""
    root = torch.nn.Module()
    for name, tensor in state.items():
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if not hasattr(module, part):
                module.add_module(part, torch.nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, torch.nn.Parameter(tensor.clone(), requires_grad=tensor.is_floating_point()))
    return root


def _rank_main(plan_path: str, rank: int) -> None:
    """One training rank: shard each module with FSDP2 and save its state_dict as SkyRL does."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Partial

    plan = torch.load(plan_path, weights_only=False)
    world_size = plan["world_size"]
    store = dist.TCPStore("127.0.0.1", plan["port"], world_size + 1, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("fsdp",))
        for raw in plan["specs"]:
            spec = FsdpSpec(Path(raw["step_dir"]), raw["state"], raw["partial_keys"], global_step=raw["global_step"])
            model = _module_with(spec.state)
            # SkyRL wraps submodules, then the root; leaf modules own one dtype each.
            for module in list(model.modules())[::-1]:
                if any(True for _ in module.parameters(recurse=False)):
                    fully_shard(module, mesh=mesh)
            fully_shard(model, mesh=mesh)
            state = model.state_dict()
            for key in spec.partial_keys:
                state[key] = DTensor.from_local(spec.state[key] / world_size, mesh, [Partial()], run_check=False)
            _save_rank_files(spec, world_size, rank, state)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- Megatron, DeepSpeed

def write_megatron_checkpoint(step_dir: str | os.PathLike[str], *, config: Mapping[str, Any] | None = None) -> Path:
    """A SkyRL Megatron step dir: policy/ is a torch_dist dist-checkpoint (Megatron tensor names)."""
    import torch.distributed.checkpoint as dcp

    config = dict(config or tiny_config())
    hidden, vocab, inter = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    qkv = (config["num_attention_heads"] + 2 * config["num_key_value_heads"]) * head_dim
    generator = torch.Generator().manual_seed(7)
    model = {"embedding.word_embeddings.weight": torch.randn(vocab, hidden, generator=generator),
             "decoder.final_layernorm.weight": torch.ones(hidden),
             "output_layer.weight": torch.randn(vocab, hidden, generator=generator)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"decoder.layers.{layer}"
        model[f"{prefix}.self_attention.linear_qkv.weight"] = torch.randn(qkv, hidden, generator=generator)
        model[f"{prefix}.self_attention.linear_proj.weight"] = torch.randn(hidden, hidden, generator=generator)
        model[f"{prefix}.mlp.linear_fc1.weight"] = torch.randn(2 * inter, hidden, generator=generator)
        model[f"{prefix}.mlp.linear_fc2.weight"] = torch.randn(hidden, inter, generator=generator)
    policy = Path(step_dir) / "policy"
    policy.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": {k: v.to(torch.bfloat16) for k, v in model.items()}}, checkpoint_id=str(policy))
    _write_json(policy / "metadata.json", {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                           "common_backend": "torch", "common_backend_version": 1})
    torch.save({"checkpoint_version": 3.0, "num_floating_point_operations_so_far": 0}, policy / "common.pt")
    write_tokenizer_and_config(policy / "huggingface", config=config)
    torch.save({"global_step": 20, "config": {"trainer": {"strategy": "megatron"}}}, Path(step_dir) / "trainer_state.pt")
    return Path(step_dir)


def write_deepspeed_checkpoint(step_dir: str | os.PathLike[str], state: Mapping[str, torch.Tensor], *,
                               deepspeed_step: int = 5, world_size: int = 2,
                               config: Mapping[str, Any] | None = None) -> Path:
    """A legacy SkyRL DeepSpeed (ZeRO-3) step dir: policy/latest, zero_to_fp32.py, global_step{K}/."""
    policy = Path(step_dir) / "policy"
    tag = f"global_step{deepspeed_step}"
    states = policy / tag
    states.mkdir(parents=True, exist_ok=True)
    (policy / "latest").write_text(tag, encoding="utf-8")
    (policy / "zero_to_fp32.py").write_text("#!/usr/bin/env python\n# DeepSpeed's ZeRO -> fp32 consolidation script\n",
                                            encoding="utf-8")
    flat = torch.cat([t.float().reshape(-1) for t in state.values()])
    for dp in range(world_size):
        torch.save({"module": {}, "param_shapes": [{n: t.shape for n, t in state.items()}], "buffer_names": [],
                    "ds_version": "0.15.4", "dp_world_size": world_size, "mp_world_size": 1},
                   states / f"zero_pp_rank_{dp}_mp_rank_00_model_states.pt")
        torch.save({"optimizer_state_dict": {"zero_stage": 3, "partition_count": world_size,
                                             "fp32_flat_groups": [torch.chunk(flat, world_size)[dp].clone()]},
                    "ds_version": "0.15.4"}, states / f"bf16_zero_pp_rank_{dp}_mp_rank_00_optim_states.pt")
    write_tokenizer_and_config(policy / "huggingface", config=config)
    torch.save({"global_step": 20, "config": {"trainer": {"strategy": "deepspeed"}}}, Path(step_dir) / "trainer_state.pt")
    return Path(step_dir)


# ---------------------------------------------------------------------------- reading back, damaging

def listing(directory: str | os.PathLike[str]) -> dict[str, int]:
    """Relative posix path -> size of every file under directory (what a store listing gives)."""
    root = Path(directory)
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def load_safetensors_folder(directory: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Every tensor of the top-level safetensors files of a model folder (names must be unique)."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        loaded = load_file(str(path))
        duplicated = set(tensors) & set(loaded)
        if duplicated:
            raise AssertionError(f"{path}: tensors already loaded from another shard: {sorted(duplicated)}")
        tensors.update(loaded)
    return tensors


def truncate(path: str | os.PathLike[str], drop_bytes: int) -> Path:
    """Cut the last drop_bytes off a file, like an interrupted download."""
    path = Path(path)
    os.truncate(path, path.stat().st_size - drop_bytes)
    return path


def rewrite_safetensors_header(path: str | os.PathLike[str], edit: Callable[[dict[str, Any]], None]) -> Path:
    """Apply edit to the parsed header of a safetensors file and write it back over the same data
    (so the header can lie about offsets, dtypes or shapes)."""
    path = Path(path)
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    edit(header)
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    path.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + length:])
    return path
