"""Redaction throughput, recall and false positives on realistic run artifacts.

    .venv/bin/python tests/benchmarks/bench_redaction.py [--quick] [--size-mb N] [--keep DIR]

Generates a tree of JSON-lines trainer metrics, a plain-text trainer log, Harbor-like trajectory
files and a pretty-printed result.json (default 200 MB; --quick 10 MB), full of SHA-256 digests,
git SHAs, uuids, token counts and URLs, with secrets of every kind planted about every 700 KB
(plus one exact environment value that matches no pattern); every other round, the self-naming
kinds are planted broken as a terminal, a shell or CRLF leaves them (each piece is an expected
finding on its own line, and must be gone after redaction). Then, side by side:

- rlkeep (`redact_tree(check=True)`, default engine) in a child process: MB/s, and the child's
  peak RSS (resource.getrusage(RUSAGE_CHILDREN).ru_maxrss);
- the corpus beside a packed copy of it (gzip-rotated log, zstd metrics, traces as a tar.gz, a zip):
  MB of text per CPU-second over both, the share read through a decompressor, and whether the
  packed copy gives the same findings;
- the same with the stdlib-only engine, if the default is re2;
- the baseline: every RULES pattern applied one by one with `re` to each line, on a sample;
- redaction in place on a copy, then a re-scan (must find nothing) and a byte search for every
  planted secret (must find none);
- the real peers on a smaller corpus of the same kind (they are 100-1000x slower), interleaved
  with rlkeep round by round (tests/benchmarks/peers.py): detect-secrets 1.5 (`scan --all-files
  --no-verify`, installed into the benchmark-only venv, never .venv), scored against the planted
  set by line (recall, and findings on lines where nothing was planted = false positives); and
  the runbook's own redaction script when ../shared/runbooks (beside the checkout) ships it (RLKEEP_RUNBOOKS to
  look elsewhere), scored by which planted secrets are gone from a redacted copy.

The last stdout line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from rlkeep.redaction import ENVIRONMENT_KIND, RULES, Redactor, available_engines, redact_tree  # noqa: E402
from tests.support.secrets_corpus import HEX, KINDS, chars, opaque_value, plant  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import packed  # noqa: E402
import peers  # noqa: E402

TARGET_MB_PER_S = 400.0  # plain text, per core (issue 29)
# the operators' runbooks sit beside the checkout (../shared/runbooks), as the brief lays them out
RUNBOOKS = Path(os.environ.get("RLKEEP_RUNBOOKS") or Path(__file__).resolve().parents[3] / "shared" / "runbooks")
RUNBOOK_SCRIPT = "secret_redaction.py"  # `python -m infra.rl_cleanup.secret_redaction ROOT` in the runbook
PLANT_EVERY_BYTES = 700_000
# Kinds that name themselves, planted broken every other round: a terminal's wrap, a padded pane
# row, a shell's backslash continuation (with and without its `> ` prompt), CRLF.
BREAKABLE_KINDS = ("aws_access_key_id", "huggingface_token", "anthropic_api_key", "openai_api_key", "github_token",
                   "google_api_key", "slack_token", "jwt", "iris_proxy_url")
BREAKS = ("\n", "   \n", "\\\n", "\\\n> ", "\r\n")
ENV_VALUE_SEED = 99


@dataclass(frozen=True)
class Expected:
    path: str
    line: int
    kind: str
    secret: str


# ------------------------------------------------------------------------------------------
# Corpus

WORDS = ("the of and to in is that for it with as on be by this are from at or an not which all we can has "
         "when will there one if what into tool call output file error python test run step loss reward "
         "agent response assistant user system def return import class self None True False print open "
         "path json yaml config model checkpoint tokenizer batch epoch grad optimizer scheduler policy value "
         "advantage rollout trajectory episode task verifier harness container docker bash cd ls cat grep "
         "pip install pytest assert raise except try while for lambda yield async await").split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 22))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", ".", ":", "?"])


def _paragraph_pool(rng: random.Random, size: int) -> list[str]:
    """Texts an agent sees: prose, code, pytest and git output, paths, digests, uuids, URLs."""
    pool = []
    for _ in range(size):
        kind = rng.random()
        if kind < 0.35:
            pool.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 8))))
        elif kind < 0.55:
            name = rng.choice(WORDS)
            pool.append(f"def {name}_{rng.randint(0, 99)}(self, batch, step={rng.randint(0, 99)}):\n"
                        f"    loss = self.model(batch['input_ids']).logits.mean()\n"
                        f"    # {_sentence(rng)}\n    return {{'loss': loss, 'step': step}}\n")
        elif kind < 0.7:
            pool.append("\n".join(f"commit {chars(rng, 40, HEX)}\nAuthor: dev{rng.randint(1, 9)} <dev@example.com>\n"
                                  f"    {_sentence(rng)}" for _ in range(rng.randint(1, 3))))
        elif kind < 0.85:
            pool.append("============================= test session starts ==============================\n"
                        + "\n".join(f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(WORDS)} "
                                    f"{rng.choice(['PASSED', 'PASSED', 'FAILED'])} [{rng.randint(1, 100)}%]"
                                    for _ in range(rng.randint(3, 12))))
        else:
            pool.append(f"Downloading https://huggingface.co/Qwen/Qwen3-8B/resolve/{chars(rng, 40, HEX)}/model.safetensors\n"
                        f"sha256:{chars(rng, 64, HEX)}  s3://rl-runs/skyrl/{rng.randint(1, 999)}/step_{rng.randint(0, 9999)}\n"
                        f"trial {'-'.join(chars(rng, n, HEX) for n in (8, 4, 4, 4, 12))} finished reward=1.0")
    return pool


class _Planter:
    """Hands out a planted secret about every PLANT_EVERY_BYTES bytes, cycling through the kinds."""

    def __init__(self, rng: random.Random, env_value: str, every: int) -> None:
        self.rng = rng
        self.env_value = env_value
        self.kinds = list(KINDS) + [ENVIRONMENT_KIND]
        self.next_index = 0
        self.every = every
        self.budget = every
        self.expected: list[Expected] = []

    def due(self, written: int) -> bool:
        self.budget -= written
        return self.budget <= 0

    def take(self) -> tuple[str, str, list[str]]:
        """(kind, text to plant, the secret or the pieces a writer broke it into)."""
        self.budget = int(self.every * self.rng.uniform(0.5, 1.5))
        kind = self.kinds[self.next_index % len(self.kinds)]
        self.next_index += 1
        if kind == ENVIRONMENT_KIND:
            return kind, f"psql -h db.internal -U trainer -W {self.env_value} runs", [self.env_value]
        planted = plant(kind, self.rng)
        if kind in BREAKABLE_KINDS and self.next_index % (2 * len(self.kinds)) >= len(self.kinds):
            # every other round of kinds: the secret as a terminal, a shell or CRLF breaks it
            form = BREAKS[(self.next_index // len(self.kinds)) % len(BREAKS)]
            cut = planted.text.index(planted.secret) + len(planted.secret) // 2
            half = len(planted.secret) // 2
            return kind, planted.text[:cut] + form + planted.text[cut:], [planted.secret[:half], planted.secret[half:]]
        return kind, planted.text, [planted.secret]


def _metrics_record(rng: random.Random, step: int) -> dict:
    record = {
        "step": step, "epoch": step // 500, "loss": rng.random(), "policy_loss": rng.random(),
        "kl": rng.random() / 100, "entropy": rng.random() * 2, "reward/mean": rng.random(),
        "reward/std": rng.random(), "response_length/mean": rng.random() * 4000,
        "num_tokens": rng.randint(1000, 900000), "tokens_per_second": rng.random() * 9000,
        "lr": 1e-6, "grad_norm": rng.random() * 3, "timestamp": f"2025-06-{rng.randint(10, 28)}T12:{rng.randint(10, 59)}:00Z",
        "run_id": "-".join(chars(rng, n, HEX) for n in (8, 4, 4, 4, 12)),
    }
    if step % 50 == 0:
        record.update({"event": "checkpoint", "path": f"s3://rl-runs/skyrl/step_{step:06d}/",
                       "checkpoint_sha256": chars(rng, 64, HEX), "git_sha": chars(rng, 40, HEX),
                       "tokenizer": "Qwen/Qwen3-8B", "eos_token": "<|im_end|>", "max_tokens": 4096})
    return record


def _trajectory(rng: random.Random, pool: list[str]) -> dict:
    messages = [{"role": "system", "content": rng.choice(pool)}, {"role": "user", "content": rng.choice(pool)}]
    for turn in range(rng.randint(2, 8)):
        command = rng.choice(["cd /repo && python -m pytest -x -q", "git log -3", "ls -la src/", "cat setup.py",
                              "pip install -e .", "grep -rn 'def train' ."])
        messages.append({"role": "assistant", "content": rng.choice(pool),
                         "tool_calls": [{"id": f"call_{chars(rng, 24)}", "type": "function",
                                         "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": rng.choice(pool)})
    return {"trial_id": "-".join(chars(rng, n, HEX) for n in (8, 4, 4, 4, 12)), "task": rng.choice(WORDS),
            "reward": rng.choice([0.0, 1.0]), "messages": messages,
            "usage": {"prompt_tokens": rng.randint(100, 90000), "completion_tokens": rng.randint(10, 9000)}}


def _embed(record: dict, text: str) -> None:
    """Put planted text in a string field, as a leaked config line or tool output would be."""
    if "messages" in record:
        message = record["messages"][-1]
        message["content"] = message["content"] + "\n$ env | grep -i key\n" + text + "\n"
    else:
        record["note"] = f"launcher: {text} (resolved)"


def _write_jsonl(path: Path, root: Path, target: int, make, planter: _Planter) -> int:
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        line_no = 0
        while written < target:
            record = make()
            planted = None
            if planter.due(0):
                planted = planter.take()
                _embed(record, planted[1])
            line = json.dumps(record) + "\n"
            line_no += 1
            out.write(line)
            written += len(line)
            planter.due(len(line))
            if planted:
                planter.expected += [Expected(path.relative_to(root).as_posix(), line_no, planted[0], piece)
                                     for piece in planted[2]]
    return written


def _write_log(path: Path, root: Path, target: int, rng: random.Random, pool: list[str], planter: _Planter) -> int:
    written = 0
    line_no = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            if planter.due(0):
                kind, text, pieces = planter.take()
                chunk = f"2025-06-12 12:00:00,000 INFO launcher: {text}\n"
                # a finding is on the line where its match (a broken secret's piece) starts
                planter.expected += [Expected(path.relative_to(root).as_posix(), line_no + 1 + (
                                         chunk[:chunk.index(piece)].count("\n") if len(pieces) > 1 else 0), kind, piece)
                                     for piece in pieces]
            elif rng.random() < 0.2:
                chunk = (f"wandb: Syncing run {chars(rng, 8, string.ascii_lowercase + string.digits)} "
                         f"(step {rng.randint(0, 9999)}) to https://wandb.ai/org/skyrl\n")
            else:
                text = rng.choice(pool)
                chunk = "".join(f"2025-06-12 12:{rng.randint(10, 59)}:00,{rng.randint(100, 999)} INFO trainer: {part}\n"
                                for part in text.split("\n"))
            out.write(chunk)
            line_no += chunk.count("\n")
            written += len(chunk)
            planter.due(len(chunk))
    return written


def _write_pretty(path: Path, root: Path, target: int, rng: random.Random, pool: list[str], planter: _Planter) -> int:
    written = 0
    line_no = 2  # the line after the opening "["
    with open(path, "w", encoding="utf-8") as out:
        out.write("[\n")
        first = True
        while written < target:
            record = _trajectory(rng, pool)
            planted = None
            if planter.due(0):
                planted = planter.take()
                _embed(record, planted[1])
            text = ("" if first else ",\n") + json.dumps(record, indent=2)
            if planted:
                escaped = json.dumps(planted[1])[1:-1]
                offset = text.index(escaped)
                planter.expected += [Expected(path.relative_to(root).as_posix(), line_no + text.count("\n", 0, offset),
                                              planted[0], piece) for piece in planted[2]]
            out.write(text)
            line_no += text.count("\n")
            written += len(text)
            planter.due(len(text))
            first = False
        out.write("\n]\n")
    return written


def generate(root: Path, size_mb: float, seed: int = 1) -> tuple[list[Expected], str]:
    rng = random.Random(seed)
    env_value = opaque_value(random.Random(ENV_VALUE_SEED))
    pool = _paragraph_pool(rng, 3000)
    total = int(size_mb * 1_000_000)
    # Every kind at least twice even in a small corpus.
    planter = _Planter(rng, env_value, min(PLANT_EVERY_BYTES, total // (2 * (len(KINDS) + 1))))
    (root / "trainer").mkdir(parents=True)
    (root / "traces").mkdir()
    (root / "config.yaml").write_text("trainer:\n  lr: 1.0e-6\n  total_steps: 2000\n"
                                      "hub:\n  token: ${HF_TOKEN}\n  repo: org/skyrl-qwen3-8b\n")
    steps = iter(range(10**9))
    _write_jsonl(root / "trainer" / "metrics.jsonl", root, int(total * 0.3),
                 lambda: _metrics_record(rng, next(steps)), planter)
    _write_log(root / "trainer" / "train.log", root, int(total * 0.1), rng, pool, planter)
    trace_total = int(total * 0.45)
    trace_files = -(-trace_total // 20_000_000)  # files of at most 20 MB
    per_file = trace_total // trace_files
    for index in range(trace_files):
        _write_jsonl(root / "traces" / f"trials_{index:03d}.jsonl", root, per_file,
                     lambda: _trajectory(rng, pool), planter)
    _write_pretty(root / "result.json", root, int(total * 0.15), rng, pool, planter)
    return planter.expected, env_value


# ------------------------------------------------------------------------------------------
# Measurements

def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def child_scan(root: str, engine: str, env_value: str) -> None:
    redactor = Redactor([env_value], engine=engine)
    started, cpu_started = time.perf_counter(), time.process_time()
    report = redact_tree(root, redactor, check=True)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "engine": redactor.engine,
                      "findings": report.to_json()["findings"], "unreadable": report.to_json()["unreadable"],
                      "files_scanned": report.files_scanned, "bytes_decompressed": report.bytes_decompressed}))


def _run_child(root: Path, engine: str, env_value: str) -> dict:
    result = subprocess.run([sys.executable, __file__, "--child-scan", str(root), engine, env_value],
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _score(findings: list[dict], expected: list[Expected]) -> dict:
    found = {(f["path"], f["line"], f["kind"]) for f in findings}
    found_lines = {(f["path"], f["line"]) for f in findings}
    expected_lines = {(e.path, e.line) for e in expected}
    missed = [e for e in expected if (e.path, e.line, e.kind) not in found]
    wrong_kind = [e for e in missed if (e.path, e.line) in found_lines]
    false_positives = [f for f in findings if (f["path"], f["line"]) not in expected_lines]
    return {"recall": round(1 - len(missed) / max(1, len(expected)), 4), "missed": len(missed),
            "missed_kinds": sorted({e.kind for e in missed}), "wrong_kind": len(wrong_kind),
            "false_positives": len(false_positives)}


def baseline(root: Path, env_value: str, sample_bytes: int) -> tuple[float, int, int]:
    """Every table pattern, one by one, with `re` over each line (no prefilter, no streaming)."""
    compiled = [(rule, re.compile(rule.pattern.encode())) for rule in RULES]
    literal = env_value.encode()
    scanned = 0
    hits = 0
    started = time.process_time()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()[: sample_bytes - scanned]
        scanned += len(data)
        for line in data.split(b"\n"):
            lowered = line.lower()
            for rule, regex in compiled:
                for match in regex.finditer(lowered if rule.lowercase else line):
                    value = line[match.start(rule.group):match.end(rule.group)]
                    if rule.accept is None or rule.accept(value):
                        hits += 1
            hits += line.count(literal)
        if scanned >= sample_bytes:
            break
    return time.process_time() - started, scanned, hits


def _score_by_line(findings: set[tuple[str, int]], expected: list[Expected]) -> dict:
    """For tools that do not name rlkeep's kinds: a planted secret counts as found when the tool
    reports its line; every reported line without a planted secret is a false positive."""
    planted_lines = {(e.path, e.line) for e in expected}
    found = sum((e.path, e.line) in findings for e in expected)
    return {"recall": round(found / max(1, len(expected)), 4), "found": found, "planted": len(expected),
            "false_positives": len(findings - planted_lines)}


def _secrets_gone(root: Path, expected: list[Expected]) -> int:
    blobs = [p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()]
    return sum(not any(needle in blob for blob in blobs for needle in (e.secret.encode(), json.dumps(e.secret)[1:-1].encode()))
               for e in expected)


def _cpu_of(run: "callable") -> tuple[object, float]:
    """(result, CPU seconds of the children it waited for): per-core figures on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare_with_peers(work: Path, size_mb: float, rounds: int) -> dict:
    """rlkeep, detect-secrets and (if shipped) the runbook's script on one smaller corpus, interleaved."""
    sample = work / "peer-corpus"
    expected, env_value = generate(sample, size_mb, seed=2)
    sample_mb = _tree_bytes(sample) / 1e6
    scores: dict[str, dict] = {}

    def rlkeep() -> dict:
        timed, cpu = _cpu_of(lambda: peers.run_timed([sys.executable, __file__, "--child-scan", str(sample), "auto", env_value]))
        child = json.loads(timed.stdout.strip().splitlines()[-1])
        scores["rlkeep"] = {**_score_by_line({(f["path"], f["line"]) for f in child["findings"]}, expected),
                            "recall_by_kind": _score(child["findings"], expected)["recall"]}
        return {"seconds": timed.seconds, "cpu_seconds": cpu, "scan_cpu_seconds": child["cpu_seconds"]}

    detect_secrets = peers.peer("detect-secrets")

    def detect() -> dict:
        timed, cpu = _cpu_of(lambda: peers.run_timed([str(detect_secrets), "scan", "--all-files", "--no-verify", "."], cwd=sample))
        results = json.loads(timed.stdout)["results"]
        lines = {(path, item["line_number"]) for path, items in results.items() for item in items}
        scores["detect-secrets"] = _score_by_line(lines, expected)
        return {"seconds": timed.seconds, "cpu_seconds": cpu}

    contenders = [peers.Contender("rlkeep", rlkeep), peers.Contender("detect-secrets", detect)]
    scripts = sorted(RUNBOOKS.rglob(RUNBOOK_SCRIPT)) if RUNBOOKS.is_dir() else []
    # a name relative to the runbooks folder: results never carry a path of the machine they ran on
    runbook_note = (f"shared/runbooks ships no {RUNBOOK_SCRIPT} (the runbook names `python -m "
                    "infra.rl_cleanup.secret_redaction`): not compared") if not scripts else scripts[0].name
    if scripts:
        copy = work / "runbook-copy"

        def reset() -> None:
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(sample, copy)

        def runbook() -> dict:
            timed, cpu = _cpu_of(lambda: peers.run_timed([sys.executable, str(scripts[0]), str(copy)]))
            gone = _secrets_gone(copy, expected)
            scores["runbook-script"] = {"recall": round(gone / max(1, len(expected)), 4), "found": gone,
                                        "planted": len(expected), "false_positives": "not scored (no line report)"}
            return {"seconds": timed.seconds, "cpu_seconds": cpu}

        contenders.append(peers.Contender("runbook-script", runbook, prepare=reset))
    compared = peers.interleave(contenders, rounds)
    per_core = {}
    for name in (c.name for c in contenders):
        cpu = sorted(run["cpu_seconds"] for run in compared["runs"] if run["name"] == name)
        per_core[name] = round(sample_mb / cpu[len(cpu) // 2], 2) if cpu[len(cpu) // 2] > 0 else None
    scan_cpu = sorted(run["scan_cpu_seconds"] for run in compared["runs"] if run["name"] == "rlkeep")
    per_core["rlkeep_scan_only"] = round(sample_mb / max(scan_cpu[len(scan_cpu) // 2], 1e-6), 1)
    return {"peer_corpus_mb": round(sample_mb, 2), "peer_planted": len(expected), "runbook_script": runbook_note,
            "peer_versions": {"detect-secrets": peers.peer_version("detect-secrets")},
            "peer_mb_per_s_per_core": per_core,
            "peer_mb_per_s_basis": "sample MB / median CPU seconds of the whole process (start-up included)",
            "peer_scores": scores, "peer_seconds": compared["seconds"],
            "peer_ratios": compared["ratios"], "peer_runs": compared["runs"]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 MB instead of 200 MB")
    parser.add_argument("--size-mb", type=float)
    parser.add_argument("--keep", type=Path, help="generate into this (new) directory and keep it")
    parser.add_argument("--peer-mb", type=float, help="size of the corpus the peers scan (default 2; --quick 0.5)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds with the peers (default 3; --quick 1)")
    parser.add_argument("--no-peers", action="store_true", help="rlkeep only")
    parser.add_argument("--child-scan", nargs=3, metavar=("ROOT", "ENGINE", "ENV_VALUE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_scan:
        child_scan(*args.child_scan)
        return 0
    size_mb = args.size_mb or (10.0 if args.quick else 200.0)
    work = Path(tempfile.mkdtemp(prefix="bench-redaction-")) if args.keep is None else args.keep
    try:
        corpus = work / "corpus"
        started = time.perf_counter()
        expected, env_value = generate(corpus, size_mb)
        corpus_bytes = _tree_bytes(corpus)
        mb = corpus_bytes / 1e6
        print(f"generated {mb:.1f} MB, {len(expected)} planted secrets in {time.perf_counter() - started:.1f}s",
              file=sys.stderr)

        default = _run_child(corpus, "auto", env_value)
        peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        scores = _score(default["findings"], expected)
        figures: dict = {"bench": "redaction", "corpus_mb": round(mb, 1), "planted": len(expected),
                         "engine": default["engine"], "mb_per_s": round(mb / default["cpu_seconds"], 1),
                         "mb_per_s_basis": "CPU time of the one scanning process (the machine is shared)",
                         "wall_mb_per_s": round(mb / default["seconds"], 1)}
        figures.update(scores)
        if default["engine"] != "re":
            stdlib = _run_child(corpus, "re", env_value)
            figures["stdlib_engine_mb_per_s"] = round(mb / stdlib["cpu_seconds"], 1)
            figures["stdlib_engine_same_findings"] = stdlib["findings"] == default["findings"]
        figures.update(packed.figures(work, corpus, lambda root: _run_child(root, "auto", env_value), default))
        print(f"scan: {figures['mb_per_s']} MB/s ({default['engine']}), recall {scores['recall']}; with a packed "
              f"copy: {figures['mixed_mb_per_s']} MB/s, {figures['mixed_decompressed_share']:.0%} through a "
              "decompressor", file=sys.stderr)

        sample = min(corpus_bytes, int((2 if args.quick else 20) * 1e6))
        seconds, scanned, _ = baseline(corpus, env_value, sample)
        figures["baseline_mb_per_s"] = round(scanned / 1e6 / seconds, 2)
        figures["baseline_sample_mb"] = round(scanned / 1e6, 1)
        print(f"baseline: {figures['baseline_mb_per_s']} MB/s on {figures['baseline_sample_mb']} MB", file=sys.stderr)

        copy = work / "redacted"
        shutil.copytree(corpus, copy)
        redactor = Redactor([env_value])
        started = time.process_time()
        redact_tree(copy, redactor)
        figures["redact_in_place_mb_per_s"] = round(mb / (time.process_time() - started), 1)
        figures["rescan_findings"] = len(redact_tree(copy, redactor, check=True).findings)
        blobs = [p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()]
        needles = {e.secret.encode() for e in expected} | {json.dumps(e.secret)[1:-1].encode() for e in expected}
        figures["secrets_left_after_redaction"] = sum(any(n in blob for blob in blobs) for n in needles)
        figures["peak_rss_mb"] = round(peak_rss_mb, 1)
        figures["peak_rss_method"] = "ru_maxrss of the child process running the default-engine scan"
        figures["target_mb_per_s"] = TARGET_MB_PER_S
        figures["target_met"] = (figures["mb_per_s"] >= TARGET_MB_PER_S and scores["recall"] == 1.0
                                 and figures["rescan_findings"] == 0 and figures["secrets_left_after_redaction"] == 0)
        figures["engines_available"] = list(available_engines())
        if not args.no_peers:
            figures.update(compare_with_peers(work, args.peer_mb or (0.5 if args.quick else 2.0),
                                              args.rounds or (1 if args.quick else 3)))
        peers.write_results("redaction", figures)
        figures.pop("peer_runs", None)  # raw runs stay in bench/results/redaction.json
        print(json.dumps(figures))
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
