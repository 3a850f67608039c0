"""A tiny Qwen3-shaped model saved as SkyRL FSDP checkpoints (world size 2) and HF exports.

Layout per docs/reference.md, formats §1.2 and §1.4. For each step the weights are one deterministic function
of (seed, step): a step's rank shards, concatenated along dim 0, equal its export's tensors
bit for bit (both bfloat16), so a consolidation can be compared to the export.
torch is imported lazily: only writing checkpoints needs it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .context import WORLD_SIZE, RunContext
from .metrics import TRAIN_BATCH_SIZE
from .runfiles import resolved_config
from .tree import Tree

if TYPE_CHECKING:
    import torch

N_LAYERS = 2
N_HEADS = 4
N_KV_HEADS = 2
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModel:
    hidden: int

    @property
    def vocab(self) -> int:
        return 128 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.hidden // N_HEADS

    @property
    def intermediate(self) -> int:
        return 3 * self.hidden

    def shapes(self) -> dict[str, tuple[int, ...]]:
        h, kv = self.hidden, N_KV_HEADS * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, h)}
        for layer in range(N_LAYERS):
            prefix = f"model.layers.{layer}"
            shapes.update({
                f"{prefix}.self_attn.q_proj.weight": (h, h),
                f"{prefix}.self_attn.k_proj.weight": (kv, h),
                f"{prefix}.self_attn.v_proj.weight": (kv, h),
                f"{prefix}.self_attn.o_proj.weight": (h, h),
                f"{prefix}.self_attn.q_norm.weight": (self.head_dim,),
                f"{prefix}.self_attn.k_norm.weight": (self.head_dim,),
                f"{prefix}.mlp.gate_proj.weight": (self.intermediate, h),
                f"{prefix}.mlp.up_proj.weight": (self.intermediate, h),
                f"{prefix}.mlp.down_proj.weight": (h, self.intermediate),
                f"{prefix}.input_layernorm.weight": (h,),
                f"{prefix}.post_attention_layernorm.weight": (h,),
            })
        shapes["model.norm.weight"] = (h,)
        shapes["lm_head.weight"] = (self.vocab, h)
        return shapes

    def hf_config(self) -> dict[str, Any]:
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": self.vocab - 3,
            "eos_token_id": self.vocab - 1,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate,
            "max_position_embeddings": 40960,
            "max_window_layers": N_LAYERS,
            "model_type": "qwen3",
            "num_attention_heads": N_HEADS,
            "num_hidden_layers": N_LAYERS,
            "num_key_value_heads": N_KV_HEADS,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.51.0",
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": self.vocab,
        }

    def generation_config(self) -> dict[str, Any]:
        return {"bos_token_id": self.vocab - 3, "do_sample": True, "eos_token_id": [self.vocab - 1, self.vocab - 3],
                "pad_token_id": self.vocab - 3, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                "transformers_version": "4.51.0"}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte maps to a printable character."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | \
        set(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def tokenizer_json(model: TinyModel, seed: int) -> dict[str, Any]:
    """A byte-level BPE tokenizer whose vocabulary is exactly the model's `vocab_size`."""
    rng = random.Random(f"{seed}/tokenizer")
    byte_chars = _bytes_to_unicode()
    alphabet = [byte_chars[b] for b in range(256)]
    vocab: dict[str, int] = {symbol: index for index, symbol in enumerate(alphabet)}
    tokens, merges = list(alphabet), []
    target = model.vocab - len(SPECIAL_TOKENS)
    while len(vocab) < target:
        left = rng.choice(tokens[-2000:] if len(tokens) > 2000 and rng.random() < 0.5 else alphabet)
        right = rng.choice(alphabet)
        merged = left + right
        if merged in vocab or len(merged) > 12:
            continue
        vocab[merged] = len(vocab)
        tokens.append(merged)
        merges.append(f"{left} {right}")
    added = [{"id": target + k, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, content in enumerate(SPECIAL_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def tokenizer_config(model: TinyModel) -> dict[str, Any]:
    first = model.vocab - len(SPECIAL_TOKENS)
    decoder = {str(first + k): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                                "single_word": False, "special": True} for k, content in enumerate(SPECIAL_TOKENS)}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 40960,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


@functools.lru_cache(maxsize=4)
def hf_sidecar_files(model: TinyModel, seed: int) -> dict[str, str]:
    """config, generation config and tokenizer files, as HF's save_pretrained writes them."""
    return {
        "config.json": json.dumps(model.hf_config(), indent=2, sort_keys=True) + "\n",
        "generation_config.json": json.dumps(model.generation_config(), indent=2, sort_keys=True) + "\n",
        "tokenizer.json": json.dumps(tokenizer_json(model, seed), indent=2, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(tokenizer_config(model), indent=2, ensure_ascii=False) + "\n",
    }


def _tensor_seed(seed: int, name: str, what: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{what}/{name}".encode()).digest()[:8], "little")


def weights_at(model: TinyModel, seed: int, step: int, n_steps: int) -> dict[str, np.ndarray]:
    """float32 weights after `step` updates: a fixed init plus a drift that grows with the step."""
    weights = {}
    for name, shape in model.shapes().items():
        init = np.random.default_rng(_tensor_seed(seed, name, "init"))
        drift = np.random.default_rng(_tensor_seed(seed, name, "drift"))
        noise = np.random.default_rng(_tensor_seed(seed, name, f"step{step}"))
        if len(shape) == 1:
            base = 1.0 + 0.05 * init.standard_normal(shape, dtype=np.float32)
        else:
            base = 0.02 * init.standard_normal(shape, dtype=np.float32)
        direction = drift.standard_normal(shape, dtype=np.float32)
        jitter = noise.standard_normal(shape, dtype=np.float32)
        weights[name] = base + np.float32(0.004 * step / n_steps) * direction + np.float32(0.0005) * jitter
    return weights


def bf16_tensors(weights: dict[str, np.ndarray]) -> dict[str, "torch.Tensor"]:
    import torch

    return {name: torch.from_numpy(array).to(torch.bfloat16) for name, array in weights.items()}


def rank_shards(tensors: dict[str, "torch.Tensor"], world_size: int) -> list[dict[str, "torch.Tensor"]]:
    """Each rank's local piece of a Shard(0) DTensor: torch.chunk along dim 0, own storage."""
    import torch

    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(world_size)]
    for name, tensor in tensors.items():
        for rank, piece in enumerate(torch.chunk(tensor, world_size, dim=0)):
            shards[rank][name] = piece.clone()
    return shards


def _extra_state(seed: int, step: int, rank: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + step * 10 + rank)
    return {
        "lr_scheduler": {"base_lrs": [1e-06], "last_epoch": step, "_step_count": step + 1,
                         "_get_lr_called_within_step": False, "_last_lr": [1e-06]},
        "client_state": {"global_step": step},
        "rng": {"cpu": generator.get_state(), "numpy": np.random.RandomState(seed + step + rank).get_state(),
                "random": random.Random(seed + step + rank).getstate()},
        "world_size": WORLD_SIZE,
        "rank": rank,
    }


def write_checkpoint(tree: Tree, ctx: RunContext, model: TinyModel, step: int, *, complete: bool) -> None:
    """ckpts/global_step_N/; an incomplete one lost rank 1's model file and never got trainer_state.pt."""
    import torch

    params = ctx.plan.params
    base = f"ckpts/global_step_{step}"
    tensors = bf16_tensors(weights_at(model, params.seed, step, params.n_steps))
    for rank, shard in enumerate(rank_shards(tensors, WORLD_SIZE)):
        if complete or rank == 0:
            torch.save(shard, tree.path(f"{base}/policy/model_world_size_{WORLD_SIZE}_rank_{rank}.pt"))
        torch.save({}, tree.path(f"{base}/policy/optim_world_size_{WORLD_SIZE}_rank_{rank}.pt"))
        torch.save(_extra_state(params.seed, step, rank),
                   tree.path(f"{base}/policy/extra_state_world_size_{WORLD_SIZE}_rank_{rank}.pt"))
    tree.write_text(f"{base}/policy/fsdp_config.json",
                    json.dumps({"fsdp_strategy": "fsdp", "world_size": WORLD_SIZE}, indent=4))
    for name, text in hf_sidecar_files(model, params.seed).items():
        tree.write_text(f"{base}/policy/huggingface/{name}", text)
    if not complete:
        return
    config = resolved_config(ctx, ctx.plan.attempts[0])
    config.pop("env_vars")
    torch.save({"global_step": step, "config": config}, tree.path(f"{base}/trainer_state.pt"))
    consumed = step * TRAIN_BATCH_SIZE
    torch.save({"_num_yielded": consumed, "_sampler_iter_yielded": consumed, "_iterator_finished": False,
                "epoch": 0, "consumed_samples": consumed}, tree.path(f"{base}/data.pt"))


def write_export(tree: Tree, ctx: RunContext, model: TinyModel, step: int, *, leftover_tmp: bool) -> None:
    """exports/global_step_N/policy/; `leftover_tmp` adds a crashed `.tmp-hf-export-ab12/` sibling."""
    from safetensors.torch import save as save_safetensors

    params = ctx.plan.params
    base = f"exports/global_step_{step}"
    tensors = bf16_tensors(weights_at(model, params.seed, step, params.n_steps))
    payload = save_safetensors(tensors, metadata={"format": "pt"})
    tree.write_bytes(f"{base}/policy/model.safetensors", payload)
    for name, text in hf_sidecar_files(model, params.seed).items():
        tree.write_text(f"{base}/policy/{name}", text)
    if leftover_tmp:  # a later export of this step died mid-write: no config.json, truncated weights
        tree.write_bytes(f"{base}/.tmp-hf-export-ab12/model.safetensors", payload[: len(payload) // 2])
        tree.write_text(f"{base}/.tmp-hf-export-ab12/generation_config.json",
                        json.dumps(model.generation_config(), indent=2, sort_keys=True) + "\n")


def write_checkpoints(tree: Tree, ctx: RunContext) -> None:
    plan = ctx.plan
    model = TinyModel(plan.params.model_hidden)
    for step in plan.complete_ckpt_steps:
        write_checkpoint(tree, ctx, model, step, complete=True)
    for step in plan.incomplete_ckpt_steps:
        write_checkpoint(tree, ctx, model, step, complete=False)
    tree.write_text("ckpts/latest_ckpt_global_step.txt", str(plan.complete_ckpt_steps[-1]))
    for step in plan.export_steps:
        write_export(tree, ctx, model, step, leftover_tmp=step == plan.export_steps[-1])
