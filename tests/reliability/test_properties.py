"""Property tests over every parser that reads run data (issue 20).

Each test names the guard it covers; removing that guard makes the test fail (shown by hand
when the test was written, see the commit message). Example counts are modest and the seed is
fixed (`derandomize=True`), so CI sees the same examples every time; RLKEEP_SOAK=1 runs more.
"""
from __future__ import annotations

import codecs
import copy
import io
import json
import os
import random
import string
import struct
import tarfile
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlkeep import export, metrics, records, redaction, traces
from rlkeep.archive import _check_member_name
from rlkeep.errors import RecordError, RlkeepError
from tests.support.secrets_corpus import KINDS, plant

SOAK = os.environ.get("RLKEEP_SOAK") == "1"


def examples(default: int) -> Any:
    return settings(max_examples=default * 10 if SOAK else default, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- record validation

GOOD_RECORD: dict[str, Any] = {
    "job": "rl-prop",
    "user": "demo",
    "scheduler": "iris",
    "cluster": "cw-test",
    "chain": ["/demo/rl-prop", "/demo/rl-prop-r1"],
    "store": "s3://bucket/iris/rl-prop",
    "base_model": "Qwen/Qwen3-8B",
    "checkpoint": {"interval": 20, "rule": {"kind": "ema_max", "metric": "reward/avg", "alpha": 0.3},
                   "behavior_break_step": 140},
    "publish": {"model": "org/rl-prop", "traces": "org/rl-prop-traces", "private": True},
    "register": {"authorized": False, "url": "sqlite:///registry.db"},
    "archive": {"dest": "s3://bucket/archives/"},
}
FIELD_PATHS = [("job",), ("user",), ("scheduler",), ("cluster",), ("chain",), ("chain", 0), ("store",),
               ("base_model",), ("kind",), ("layout",), ("layout", "traces"), ("checkpoint",),
               ("checkpoint", "interval"), ("checkpoint", "rule"), ("checkpoint", "rule", "kind"),
               ("checkpoint", "rule", "step"), ("checkpoint", "rule", "min_step"), ("checkpoint", "rule", "alpha"),
               ("checkpoint", "behavior_break_step"), ("publish",), ("publish", "model"), ("register",),
               ("register", "authorized"), ("register", "url"), ("archive",), ("archive", "dest"),
               ("tracker_url",), ("store_region",)]

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                         st.text(max_size=20), st.sampled_from(["step", "latest", "ema_max", "slurm", "none", "12345",
                                                                "/demo/x", "s3://b/p", "org/name"]))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(["kind", "step", "min_step", "url", "dest"])),
                    inner, max_size=4)), max_leaves=10)


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = data
    for part in path[:-1]:
        if isinstance(part, int):
            if not isinstance(node, list) or len(node) <= part:
                return
        elif not isinstance(node, dict):
            return
        elif part not in node or not isinstance(node[part], (dict, list)):
            node[part] = {}
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(node, list) and len(node) > last:
            node[last] = value
    elif isinstance(node, dict):
        node[last] = value


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(GOOD_RECORD)
    for path in draw(st.lists(st.sampled_from(FIELD_PATHS), min_size=1, max_size=3)):
        if draw(st.booleans()) and len(path) == 1:
            data.pop(path[0], None)
        else:
            _set(data, path, draw(yaml_values))
    return data


def _load_or_error(tmp_dir: Path, text: str | bytes) -> None:
    path = tmp_dir / "records" / "rl-prop.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        records.load_record(path)
    except RecordError as error:
        message = str(error)
        assert message.startswith(f"{path}: "), message
        assert "\n" not in message.split(": ", 1)[1] or "YAML" in message


@examples(150)
@given(mutated_records())
def test_any_record_mapping_is_valid_or_one_record_error(data: dict[str, Any]) -> None:
    """Guard: records.validate_record_data runs the schema before the cross-field checks (they
    index fields the schema guarantees): any mutation of a good record loads or raises one
    RecordError naming the file, never a traceback (without the schema step: KeyError 'job')."""
    with tempfile.TemporaryDirectory() as tmp:
        _load_or_error(Path(tmp), yaml.safe_dump(data))


@examples(100)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200),
                 yaml_values.map(lambda value: yaml.safe_dump(value))))
def test_any_yaml_text_is_valid_or_one_record_error(text: str | bytes) -> None:
    """Guard: load_record's UTF-8 decode and YAML parse handlers (removing the
    UnicodeDecodeError one lets a traceback out for non-UTF-8 bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        _load_or_error(Path(tmp), text)


# --------------------------------------------------------------------------- metric logs

def _metric_dict(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["reward/avg", "loss", "policy/kl", "timing/step"]), min_size=1,
                          max_size=3, unique=True))
    return {name: draw(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.integers(-100, 100))) for name in names}


@st.composite
def log_lines(draw: st.DrawFn) -> list[str]:
    lines: list[str] = []
    step = 0
    for _ in range(draw(st.integers(0, 8))):
        shape = draw(st.sampled_from(["wandb", "console", "json", "noise", "prefixed", "junk", "broken"]))
        step += draw(st.integers(0, 2))
        values = _metric_dict(draw)
        if shape == "wandb":
            lines.append(f"WANDB_MIRROR kind=train step={step} metrics={json.dumps(values)}")
        elif shape == "console":
            lines.append(f"Step {step}:")
            lines.append("{" + ", ".join(f"'{k}': {v!r}" for k, v in values.items()) + "}")
        elif shape == "json":
            lines.append(json.dumps({"step": step, **values}))
        elif shape == "prefixed":
            lines.append(f"[17:05:45] task=/demo/rl/0 | (skyrl pid=22) WANDB_MIRROR kind=train step={step} "
                         f"metrics={json.dumps(values)}")
        elif shape == "broken":
            lines.append("WANDB_MIRROR kind=train step=" + str(step) + " metrics={" + draw(st.text(max_size=10)))
        elif shape == "junk":
            lines.append(draw(st.text(alphabet=string.printable + "{}é\x1b", max_size=40)).replace("\n", " "))
        else:
            lines.append(f"INFO loading shard {step} of the model")
    return lines


def _outcome(parse: Any) -> tuple[str, Any]:
    try:
        parsed = parse()
    except metrics.MetricsError as error:
        return "error", type(error).__name__
    return "rows", (parsed.serialization, parsed.rows, parsed.eval_rows)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return pieces


@examples(150)
@given(log_lines(), st.lists(st.integers(0, 2000), max_size=12), st.sampled_from(["\n", "\r\n"]))
def test_metric_log_rows_do_not_depend_on_how_the_bytes_arrive(lines: list[str], cuts: list[int],
                                                               newline: str) -> None:
    """Guard: _Scanner.feed holds back a partial line / open block (`carry`) and the look-back
    context; splitting the same bytes anywhere gives the rows of one whole read."""
    data = (newline.join(lines) + newline).encode("utf-8")
    whole = _outcome(lambda: metrics.parse_log_stream([data], "log"))
    split = _outcome(lambda: metrics.parse_log_stream(_split(data, cuts), "log"))
    assert split == whole


@examples(150)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=6))
def test_any_log_bytes_give_rows_or_a_metrics_error(data: bytes, cuts: list[int]) -> None:
    """Guard: the scanner decodes candidate lines with errors='replace' and every malformed
    block becomes a MetricsError naming the source, never a traceback."""
    for pieces in ([data], _split(data, cuts)):
        try:
            metrics.parse_log_stream(pieces, "log")
        except metrics.MetricsError as error:
            assert str(error).startswith("log"), error


# --------------------------------------------------------------------------- tar extraction

NAME_PARTS = st.sampled_from(["a", "b", "..", ".", "", "/", "\\", "C:", "trial-1", "x\\..", "..\\y"])
member_names = st.lists(NAME_PARTS, min_size=1, max_size=5).map(lambda parts: "/".join(parts))


@st.composite
def tar_members(draw: st.DrawFn) -> list[tuple[str, bytes, str]]:
    members = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                                     tarfile.FIFOTYPE]))
        members.append((draw(member_names), kind, draw(member_names)))
    return members


def _write_tar(path: Path, members: list[tuple[str, bytes, str]]) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            payload = b"payload" if kind == tarfile.REGTYPE else b""
            info.size = len(payload)
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = link
            tar.addfile(info, io.BytesIO(payload) if payload else None)


@examples(200)
@given(tar_members())
def test_no_tar_member_lands_outside_the_target(members: list[tuple[str, bytes, str]]) -> None:
    """Guard: traces.unsafe_member_reason (absolute, '..', links, devices, FIFOs refuse the
    whole tar before anything is written)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tar_path = root / "in.tar"
        _write_tar(tar_path, members)
        dest = root / "box" / "dest"
        try:
            traces.safe_extract(tar_path, dest)
        except RlkeepError:
            assert not dest.exists() or not any(dest.iterdir()), "a refused tar left files behind"
        everything = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
        outside = [p for p in everything if p not in {"in.tar", "box"} and not p.startswith("box/dest")]
        assert outside == [], outside
        for path in dest.rglob("*") if dest.exists() else []:
            assert not path.is_symlink() and (path.is_file() or path.is_dir()), path
            assert path.resolve().is_relative_to(dest.resolve()), path


@examples(200)
@given(member_names)
def test_an_archived_member_name_stays_under_its_root(name: str) -> None:
    """Guard: archive._check_member_name (archive re-packs members under <tree>/<name>)."""
    try:
        clean = _check_member_name(name, "in.tar")
    except RlkeepError:
        return
    root = Path("/archive/tree")
    joined = Path(os.path.normpath(root / clean))
    assert joined.is_relative_to(root) and joined != root, (name, clean)


# --------------------------------------------------------------------------- safetensors headers

@st.composite
def safetensors_files(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["random", "declared", "header"]))
    if shape == "random":
        return draw(st.binary(max_size=64))
    if shape == "declared":
        length = draw(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([2**63, 2**64 - 1, 10**9, 99_999_999])))
        return struct.pack("<Q", length) + draw(st.binary(max_size=32))
    tensors: dict[str, Any] = {}
    position = 0
    for index in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from(["F32", "BF16", "I8", "F64", "BOOL", "X9"]))
        shape_ = draw(st.lists(st.integers(0, 3), max_size=2))
        size = draw(st.one_of(st.just(None), st.integers(0, 40)))
        width = export.DTYPE_BYTES.get(dtype, 1)
        end = position + (size if size is not None else width * (shape_[0] if shape_ else 1) * (shape_[1] if len(shape_) > 1 else 1))
        tensors[f"t{index}"] = {"dtype": dtype, "shape": shape_, "data_offsets": [position, end]}
        position = end
    if draw(st.booleans()):
        tensors["__metadata__"] = draw(st.dictionaries(st.text(max_size=3), st.one_of(st.text(max_size=3), st.integers()),
                                                       max_size=2))
    header = json.dumps(tensors).encode()
    return struct.pack("<Q", len(header)) + header + bytes(position + draw(st.integers(-2, 2)) if position > 1 else position)


@examples(200)
@given(safetensors_files())
def test_any_safetensors_bytes_give_a_verdict_in_bounded_memory(data: bytes) -> None:
    """Guard: export.read_safetensors_header's length checks (HeaderTooLarge and
    MetadataIncompleteBuffer before the read): a huge declared length is refused without
    allocating it; anything else is a header or one RlkeepError naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        path.write_bytes(data)
        tracemalloc.start()
        try:
            header = export.read_safetensors_header(path)
        except RlkeepError as error:
            assert str(error).startswith(f"{path}: "), error
        else:
            assert 8 + header.header_bytes + header.data_bytes == len(data)
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert peak < 1_000_000 + 4 * len(data), f"peak {peak} bytes for a {len(data)}-byte file"


# --------------------------------------------------------------------------- redaction

FILLER = string.ascii_lowercase + " .,\n"
filler = st.text(alphabet=FILLER, max_size=300)
WIDE_ENCODINGS = [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
                  (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (b"", "utf-16-le")]


@st.composite
def planted_texts(draw: st.DrawFn) -> tuple[str, str, str]:
    kind = draw(st.sampled_from(KINDS))
    planted = plant(kind, random.Random(draw(st.integers(0, 2**32))))
    before, after = draw(filler), draw(filler)
    return kind, planted.secret, f"{before}\n{planted.text}\n{after}"


class _ShortReads:
    """A stream that hands out at most `sizes[i]` bytes per read (short reads, as a pipe does)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data, self._sizes, self._at = data, sizes or [7], 0

    def read(self, size: int) -> bytes:
        count = min(size, self._sizes[self._at % len(self._sizes)])
        self._at += 1
        chunk = self._data[:count]
        self._data = self._data[count:]
        return chunk


@examples(120)
@given(planted_texts(), st.lists(st.integers(1, 5000), min_size=1, max_size=6),
       st.sampled_from([(1024, 2048), (3000, 2048), (redaction.CHUNK_SIZE, redaction.OVERLAP)]))
def test_a_planted_secret_is_found_however_the_windows_fall(planted: tuple[str, str, str], sizes: list[int],
                                                            window: tuple[int, int]) -> None:
    """Guard: Redactor.redact_stream re-scans the last `overlap` bytes of each window (and keeps
    `context` before it), so a secret split across reads or windows is still found whole."""
    kind, secret, text = planted
    chunk, overlap = window
    pieces: list[bytes] = []

    class Sink:
        def emit(self, original: memoryview, redacted: bytes | None) -> None:
            pieces.append(bytes(original) if redacted is None else redacted)

    redactor = redaction.Redactor()
    findings = redactor.redact_stream(_ShortReads(text.encode(), sizes).read, Sink(), chunk, overlap)
    out = b"".join(pieces).decode()
    assert secret not in out, kind
    assert findings, kind
    assert out.count("\n") == text.count("\n")  # markers keep line numbers true


@examples(60)
@given(planted_texts(), st.sampled_from(WIDE_ENCODINGS))
def test_a_planted_secret_is_found_in_every_encoding_the_redactor_reads(planted: tuple[str, str, str],
                                                                       encoding: tuple[bytes, str]) -> None:
    """Guard: classify's BOM/UTF-16 sniffing and _TranscodingReader: wide text is transcoded
    before matching and written back in its own encoding."""
    kind, secret, text = planted
    bom, codec = encoding
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trial.log"
        path.write_bytes(bom + text.encode(codec))
        outcome = redaction.scan_file(path, "trial.log", redaction.Redactor(), check=False)
        data = path.read_bytes()
        assert data.startswith(bom)
        decoded = data[len(bom):].decode(codec)
        assert outcome.findings and secret not in decoded, (kind, codec)


@st.composite
def crowded_texts(draw: st.DrawFn) -> str:
    """Several secrets side by side, with the keywords context rules look for between them."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        rng = random.Random(draw(st.integers(0, 2**32)))
        parts.append(draw(st.sampled_from(["", "", "WANDB_API_KEY=", "wandb ", "token=", "api_key: "])))
        if draw(st.booleans()):  # a bare 40-hex value: a key only in reach of a context word
            parts.append("".join(rng.choice("0123456789abcdef") for _ in range(40)))
        else:
            parts.append(plant(draw(st.sampled_from(KINDS)), rng).text)
        parts.append(draw(st.sampled_from(["", " ", " ", "\n", ",", "\""])))
    return draw(filler) + "\n" + "".join(parts) + "\n" + draw(filler)


@examples(150)
@given(st.one_of(planted_texts().map(lambda planted: planted[2]), crowded_texts()), filler)
@example("WANDB_API_KEY=" + "3f" * 20 + " " + "a7" * 20, "")  # the second key is in reach only after the first goes
def test_redaction_is_idempotent_and_leaves_clean_text_alone(text: str, clean: str) -> None:
    """Guard: Redactor._redact_region scans the text around each new marker again until clean
    (removing one secret can bring another within reach of a context rule), so a second pass
    finds nothing; clean text is returned as it was."""
    redactor = redaction.Redactor()
    once, findings = redactor.redact_text(text)
    twice, again = redactor.redact_text(once)
    assert again == [] and twice == once, findings
    assert redactor.redact_text(clean) == (clean, [])
