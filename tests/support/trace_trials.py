"""Hand-written Harbor trial folders for the trace-dataset compatibility tests: one trial per
call, with the ATIF steps given explicitly (`user`, `agent`), continuations chained by
`continued_trajectory_ref`, and the shared edge-case trials (`write_native_tools_trial`).
`export` runs rlkeep's build and returns the rows by trial."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from rlkeep.redaction import Redactor
from rlkeep.traces import build_trace_dataset

MODEL = "hosted_vllm/Qwen3-8B"
STARTED = "2026-03-30T17:04:11.000000Z"


def write_trial(root: Path, name: str, steps: list[dict], *, reward: float | None = 1.0,
                exception: str | None = None, agent: dict | None = None, continuations: list[list[dict]] = (),
                extra_files: dict[str, object] | None = None, stdout: str | None = "3 passed",
                stderr: str | None = None, continuation_names: list[str] | None = None) -> None:
    """continuation_names: the continuations' file names in chain order (default
    trajectory.cont-1.json, -2, ...); each file's `continued_trajectory_ref` names the next."""
    trial = root / name
    (trial / "agent").mkdir(parents=True)
    block = agent or {"name": "terminus-2", "version": "2.0.0", "model_name": MODEL}
    docs = [steps, *continuations]
    names = ["trajectory.json", *(continuation_names or [f"trajectory.cont-{i}.json" for i in range(1, len(docs))])]
    for index, doc_steps in enumerate(docs):
        doc = {"schema_version": "ATIF-v1.6", "agent": block, "steps": doc_steps}
        if index + 1 < len(docs):
            doc["continued_trajectory_ref"] = names[index + 1]
        (trial / "agent" / names[index]).write_text(json.dumps(doc, indent=2))
    for rel, body in (extra_files or {}).items():
        (trial / rel).parent.mkdir(parents=True, exist_ok=True)
        (trial / rel).write_text(json.dumps(body, indent=2))
    result = {
        "id": "0", "task_name": "codecontests-1234", "trial_name": name, "started_at": STARTED,
        "config": {"job_id": None, "agent": {"name": "terminus-2", "model_name": MODEL}},
        "agent_info": {"name": "terminus-2", "version": "2.0.0",
                       "model_info": {"name": "Qwen3-8B", "provider": "hosted_vllm"}},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None if exception is None else {"exception_type": exception,
                                                          "exception_message": "timed out"},
    }
    (trial / "result.json").write_text(json.dumps(result, indent=4))
    (trial / "verifier").mkdir()
    if stdout is not None:
        (trial / "verifier" / "test-stdout.txt").write_text(stdout)
    if stderr is not None:
        (trial / "verifier" / "test-stderr.txt").write_text(stderr)


def user(step_id: int, text: str, **extra) -> dict:
    return {"step_id": step_id, "source": "user", "message": text, **extra}


def agent(step_id: int, text: str, *, observation: list[dict] | None = None, reasoning: str | None = None,
          calls: list[dict] | None = None, **extra) -> dict:
    step = {"step_id": step_id, "source": "agent", "message": text, **extra}
    if reasoning:
        step["reasoning_content"] = reasoning
    if calls:
        step["tool_calls"] = calls
    if observation is not None:
        step["observation"] = {"results": observation}
    return step


def export(root: Path, out: Path, **options) -> tuple[dict, dict[str, list[dict]]]:
    options.setdefault("redactor", Redactor())
    manifest = build_trace_dataset(root, out, **options)
    by_trial: dict[str, list[dict]] = {}
    for shard in manifest["shards"]:
        for row in pq.read_table(out / "data" / shard["name"]).to_pylist():
            by_trial.setdefault(row["trial_name"], []).append(row)
    return manifest, by_trial


TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}}]
NATIVE_TOOLS_TRIAL = "native-tools__DDDDDDD"


def write_native_tools_trial(root: Path) -> None:
    """An agent with native tools (`agent.tool_definitions`): a system step, a user step, a tool
    call with reasoning and its observation, and a final call without arguments."""
    write_trial(root, NATIVE_TOOLS_TRIAL, [
        {"step_id": 1, "source": "system", "message": "You are a coding agent."},
        user(2, "Fix the bug."),
        agent(3, "", reasoning="look first", calls=[{"tool_call_id": "c1", "function_name": "bash",
                                                    "arguments": {"cmd": "ls"}}],
              observation=[{"source_call_id": "c1", "content": "main.py"}]),
        agent(4, "fixed", calls=[{"tool_call_id": "c2", "function_name": "finish"}]),
    ], agent={"name": "openhands", "version": "1", "model_name": MODEL, "tool_definitions": TOOLS})


def atif(steps: list[dict], **fields) -> dict:
    """A bare ATIF document (for extra_files: subagents, unreferenced continuations)."""
    return {"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": MODEL},
            "steps": steps, **fields}


def write_reordered_continuations_trial(root: Path, name: str = "reordered__KKKKKKK") -> None:
    """A continuation chain whose order is not the file names' order (trajectory.json ->
    cont-10 -> cont-2), beside a continuation file no trajectory references (cont-3)."""
    prompt = user(1, "Task: count the lines.")
    write_trial(root, name, [prompt, agent(2, "wc -l a.txt", observation=[{"content": "12 a.txt"}])],
                continuations=[[dict(prompt, is_copied_context=True), user(2, "Summary one."),
                                agent(3, "second context", observation=[{"content": "ok"}])],
                               [dict(prompt, is_copied_context=True), user(2, "Summary two."),
                                agent(3, "third context")]],
                continuation_names=["trajectory.cont-10.json", "trajectory.cont-2.json"],
                extra_files={"agent/trajectory.cont-3.json": atif([user(1, "never referenced"),
                                                                   agent(2, "never referenced")])})


def write_dangling_continuation_trial(root: Path, name: str = "dangling__LLLLLLL") -> None:
    """trajectory.json names a continuation that is not there: the chain ends with it."""
    write_trial(root, name, [user(1, "Task"), agent(2, "only context")])
    path = root / name / "agent" / "trajectory.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), continued_trajectory_ref="trajectory.cont-1.json")))


def write_text_parts_trial(root: Path, name: str = "text-parts__MMMMMMM") -> None:
    """Observation contents given as lists of text parts (no media): Harbor reads the first part."""
    write_trial(root, name, [
        user(1, "Task"),
        agent(2, "ls", observation=[{"content": [{"type": "text", "text": "a.txt"}, {"type": "text", "text": "b.txt"}]},
                                    {"content": [{"type": "text", "text": "c.txt"}]}]),
        agent(3, "done"),
    ])


def write_message_parts_trial(root: Path, name: str = "message-parts__UUUUUUU") -> None:
    """Step messages given as lists of text parts. Harbor 0.26 documents its content as text by
    normalize_message_content, but only applies it to observations: its export stops with a
    TypeError on this trial. rlkeep applies the documented rule (the first part's text)."""
    write_trial(root, name, [
        user(1, [{"type": "text", "text": "Task in parts:"}, {"type": "text", "text": "second part"}]),
        agent(2, [{"type": "text", "text": "ls"}], observation=[{"content": "a.txt"}]),
        agent(3, "done"),
    ])


IMAGE_PART = {"type": "image", "source": {"media_type": "image/png", "path": "images/screen.png"}}


def write_image_trial(root: Path, name: str = "screenshot__NNNNNNN", *, reward: float = 0.0) -> None:
    """An observation with an image part (ATIF v1.6 multimodal content)."""
    write_trial(root, name, [user(1, "Task"), agent(2, "take a screenshot", observation=[
        {"content": [{"type": "text", "text": "here it is"}, IMAGE_PART]}]), agent(3, "done")], reward=reward)
