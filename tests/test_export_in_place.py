"""The export step on an FSDP checkpoint in the real S3 server: the rank files are read in place by
ranged GETs, so the data root holds the model's bytes once (sampled while the step runs, and no
rank file ever appears there), and the model equals the gathered full state."""
from __future__ import annotations

import io
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from rlkeep.context import StepContext
from rlkeep.diskspace import bytes_under
from rlkeep.errors import RlkeepError
from rlkeep.export.step import export_model_step
from rlkeep.records import validate_record_data
from rlkeep.storage import open_store
from tests.support.checkpoints import load_safetensors_folder, tiny_config, tiny_state_dict, write_fsdp_checkpoint

# big enough that the step takes long enough to be sampled many times (about 50 MB of bf16)
CONFIG = tiny_config(hidden_size=1024, vocab_size=701, layers=2, heads=16, kv_heads=4, head_dim=64,
                     intermediate_size=3072)
STATE = tiny_state_dict(3, config=CONFIG)
STEP = 20


@pytest.fixture(scope="module")
def fsdp_step_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fsdp_checkpoint(tmp_path_factory.mktemp("fsdp") / f"global_step_{STEP}", STATE, world_size=3,
                                 config=CONFIG)


def upload(step_dir: Path, bucket: str, job: str, *, damage: dict[str, bytes] | None = None) -> None:
    store = open_store(f"s3://{bucket}/iris/{job}")
    files = [p for p in step_dir.rglob("*") if p.is_file()]
    damage = damage or {}

    def put(path: Path) -> None:
        rel = path.relative_to(step_dir).as_posix()
        store.put_bytes(f"ckpts/global_step_{STEP}/{rel}", damage.get(rel, path.read_bytes()))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))


def context(data_root: Path, bucket: str, job: str) -> StepContext:
    data = {"job": job, "user": "demo", "scheduler": "none", "chain": [f"/demo/{job}"],
            "store": f"s3://{bucket}/iris/{job}", "checkpoint": {"interval": 20}}
    record = validate_record_data(data, Path(f"records/{job}.yaml"))
    job_dir = data_root / job
    job_dir.mkdir(parents=True)
    selected = job_dir / "selected.json"
    selected.write_text(json.dumps({"step": STEP}))
    return StepContext(job=job, record=record, data_root=data_root, inputs={"selected": selected},
                       outputs={"model": job_dir / "model", "export": job_dir / "export.json"})


class DiskSampler:
    """The bytes under a folder and the names of the files there, sampled on a thread."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak, self.samples, self.names = folder, 0, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.0005)

    def sample(self) -> None:
        self.peak = max(self.peak, bytes_under(self.folder))
        self.names.update(name for _, _, names in os.walk(self.folder) for name in names)
        self.samples += 1

    def __enter__(self) -> "DiskSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def test_fsdp_export_holds_the_model_once_and_equals_the_full_state(fsdp_step_dir: Path, bucket: str,
                                                                   tmp_path: Path) -> None:
    upload(fsdp_step_dir, bucket, "rl-inplace")
    rank_bytes = sum(p.stat().st_size for p in fsdp_step_dir.glob("policy/model_world_size_3_rank_*.pt"))
    ctx = context(tmp_path, bucket, "rl-inplace")
    with DiskSampler(ctx.job_dir) as sampler:
        export_model_step(ctx)
    model = ctx.outputs["model"]
    got = load_safetensors_folder(model)
    assert list(got) == list(STATE)
    for name, tensor in STATE.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name

    model_bytes = bytes_under(model)
    weights = sum(t.numel() * t.element_size() for t in STATE.values())
    aux = sum(p.stat().st_size for p in (fsdp_step_dir / "policy" / "huggingface").iterdir())
    assert sampler.samples > 20, sampler.samples
    assert not [name for name in sampler.names if name.startswith("model_world_size_")], sorted(sampler.names)
    # at its peak: the model being written, the small files it is written with (config, tokenizer,
    # fsdp_config.json, the download record), the step's inputs; never a second copy of the weights
    assert model_bytes >= weights and sampler.peak >= weights
    assert sampler.peak <= model_bytes + 2 * aux + 64 * 1024, (sampler.peak, model_bytes, aux)
    assert sampler.peak < weights * 1.2 < rank_bytes * 2

    report = json.loads(ctx.outputs["export"].read_text())
    assert report["format"] == "fsdp" and report["source"].endswith(f"/ckpts/global_step_{STEP}")
    assert any("read in place from the store" in note for note in report["notes"]), report["notes"]
    assert not (ctx.job_dir / ".work" / "export" / f"global_step_{STEP}-ckpt").exists()


def test_a_truncated_rank_file_in_the_store_is_named_and_nothing_is_left(fsdp_step_dir: Path, bucket: str,
                                                                          tmp_path: Path) -> None:
    rank = "policy/model_world_size_3_rank_1.pt"
    upload(fsdp_step_dir, bucket, "rl-cut", damage={rank: (fsdp_step_dir / rank).read_bytes()[:-5000]})
    ctx = context(tmp_path, bucket, "rl-cut")
    with pytest.raises(RlkeepError) as refused:
        export_model_step(ctx)
    message = str(refused.value)
    assert f"ckpts/global_step_{STEP}/{rank}" in message and "zip" in message, message
    assert not ctx.outputs["model"].exists() and not ctx.outputs["export"].exists()
    assert not list(ctx.job_dir.glob(".model.tmp-*"))


def test_a_rank_file_replaced_while_it_is_read_refuses_and_removes_the_model(fsdp_step_dir: Path, bucket: str,
                                                                            tmp_path: Path) -> None:
    from rlkeep.export import detect_format
    from rlkeep.export.step import _consolidate_in_place

    upload(fsdp_step_dir, bucket, "rl-moved")
    store = open_store(f"s3://{bucket}/iris/rl-moved")
    prefix = f"ckpts/global_step_{STEP}"
    listed = {info.key[len(prefix) + 1:]: info for info in store.list(prefix)}
    identity = {name: [info.size, info.etag, info.last_modified] for name, info in listed.items()}
    detection = detect_format({name: info.size for name, info in listed.items()})
    sizes = {name: listed[name].size for name in detection.needed_files}
    small = tmp_path / "small"
    for name in sizes:
        if "model_world_size_" not in name:
            (small / name).parent.mkdir(parents=True, exist_ok=True)
            (small / name).write_bytes((fsdp_step_dir / name).read_bytes())
    rank = "policy/model_world_size_3_rank_2.pt"
    data = bytearray((fsdp_step_dir / rank).read_bytes())
    data[-30_000] ^= 0xFF  # the same size, another object: a new ETag
    store.put_bytes(f"{prefix}/{rank}", bytes(data))
    model = tmp_path / "job" / "model"
    with pytest.raises(RlkeepError) as refused:
        _consolidate_in_place(store, prefix, sizes, identity, small, model, detection, store.url_of(prefix))
    message = str(refused.value)
    assert rank in message and "changed in the store while the model was read" in message, message
    assert not model.exists() and not list(model.parent.glob(".model.tmp-*"))


def test_ranged_reads_return_exactly_the_bytes_asked_for(bucket: str) -> None:
    store = open_store(f"s3://{bucket}/ranges")
    data = os.urandom(3 << 20)
    store.put_bytes("blob", data)
    for offset, length in ((0, 1), (5, 100), (1 << 20, 2 << 20), (len(data) - 7, 7), (17, 0)):
        sink = io.BytesIO()
        assert store.read_range("blob", offset, length, sink) == length
        assert sink.getvalue() == data[offset:offset + length], (offset, length)
    with pytest.raises(Exception) as beyond:
        store.read_range("blob", len(data) + 10, 5, io.BytesIO())
    assert "blob" in str(beyond.value)
