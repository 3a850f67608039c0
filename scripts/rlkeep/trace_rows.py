"""ATIF trajectories -> trace-dataset conversations, rendered as Harbor 0.26's `traces export` does.

Facts this follows (docs/reference.md, formats §3.3 and §4 and the issue 21 comparison with Harbor 0.26):
- Each trajectory file is one context the model saw: trajectory.json, then each
  `trajectory.cont-N.json` after a context summarization. A row holds the steps of the file its
  episode lives in, so a post-summary row starts from what the model saw after the summary (the
  copied context and the summary), not from the whole history. Episodes keep counting across
  files; an agent step marked `is_copied_context` is context, not a new episode.
- Roles: `system` steps -> "system", `user` steps -> "user", `agent` steps -> "assistant"; an
  observation is a "user" turn after its agent turn except after the row's final agent turn.
  Consecutive same-role turns stay apart (nothing is merged).
- An observation with several results contributes its first result only.
- Agent turns: `<think>{reasoning}</think>\\n{message}` (reasoning only when present), then one
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` block per call, joined by newlines.
- Native tools (`agent.tool_definitions`): a `<tools>` block (one JSON definition per line) is
  appended to the first system message of each context (a system message holding only the block
  is put first when there is none); the definitions also fill `tool_definitions`, and the system
  text is the `instruction`.
- Subagents (`observation.results[].subagent_trajectory_ref`): the referenced trajectory files
  (paths relative to the trial's agent/ folder) give rows of their own, labelled in `trace_source`
  (`subagent:<trajectory_path or session_id>`); the main trajectory's rows say `main`.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

MAIN_SOURCE = "main"
ROLE_OF_SOURCE = {"system": "system", "user": "user", "agent": "assistant"}
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}

CONVERSATION_TYPE = pa.list_(pa.struct([
    pa.field("role", pa.string(), nullable=False),
    pa.field("content", pa.string(), nullable=False),
]))
SHAREGPT_TYPE = pa.list_(pa.struct([
    pa.field("from", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
]))
TEXT_COLUMNS = ("agent", "model", "model_provider", "date", "task", "episode", "run_id", "trial_name",
                "result", "instruction", "verifier_output", "tool_definitions", "trace_source")
COLUMNS = ("conversations",) + TEXT_COLUMNS
SHAREGPT_COLUMN = "conversations_sharegpt"
# Shard names as Harbor's exporter (and `datasets.push_to_hub`) writes them.
SHARD_NAME = "train-{index:05d}-of-{count:05d}.parquet"


def _value() -> dict[str, str]:
    return {"dtype": "string", "_type": "Value"}


def hf_features(sharegpt: bool) -> dict[str, Any]:
    """The `datasets` Features of the rows, in the form every `datasets` version reads (a list of
    dicts is a list feature: `List` from datasets 4 on, a sequence of dicts before)."""
    features: dict[str, Any] = {"conversations": [{"role": _value(), "content": _value()}]}
    features.update({name: _value() for name in TEXT_COLUMNS})
    if sharegpt:
        features[SHAREGPT_COLUMN] = [{"from": _value(), "value": _value()}]
    return features


def row_schema(sharegpt: bool = False) -> pa.Schema:
    """The arrow schema with the `huggingface` Features metadata in the footer, so that
    `datasets.load_dataset("parquet", ...)` gives the same Features as Harbor's export."""
    fields = [pa.field("conversations", CONVERSATION_TYPE, nullable=False)]
    fields += [pa.field(name, pa.string()) for name in TEXT_COLUMNS]
    if sharegpt:
        fields.append(pa.field(SHAREGPT_COLUMN, SHAREGPT_TYPE, nullable=False))
    metadata = json.dumps({"info": {"features": hf_features(sharegpt)}}, separators=(",", ":"))
    return pa.schema(fields, metadata={b"huggingface": metadata.encode()})


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str
    episode: int | None  # the episode an assistant turn ends; None for context and observations


@dataclass(frozen=True)
class Context:
    """The messages of one trajectory file, in order."""

    messages: list[Message]


def content_text(value: Any) -> str:
    """ATIF message / observation content: a string, or (v1.6+) a list of content parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        pieces = []
        for part in value:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'content')}]")
        return "\n".join(pieces)
    return json.dumps(value, ensure_ascii=False)


def render_agent_turn(step: dict[str, Any], *, repair_think: bool = False) -> str:
    """`<think>{reasoning}</think>\\n{message}` plus one <tool_call> block per call.
    repair_think (cleaning only): an orphaned `</think>` gets its opening tag back."""
    message = content_text(step.get("message"))
    reasoning = content_text(step.get("reasoning_content"))
    if repair_think and "</think>" in message and "<think>" not in message and not reasoning:
        message = "<think>" + message
    pieces = [f"<think>{reasoning}</think>\n{message}" if reasoning else message]
    for call in step.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        payload = {"name": call.get("function_name"), "arguments": call.get("arguments")}
        pieces.append("<tool_call>\n" + json.dumps(payload, ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(piece for piece in pieces if piece)


def _results(step: dict[str, Any]) -> list[dict[str, Any]]:
    observation = step.get("observation")
    if not isinstance(observation, dict):
        return []
    return [result for result in observation.get("results") or [] if isinstance(result, dict)]


def observation_text(step: dict[str, Any]) -> str:
    """The first observation result's content (Harbor keeps only the first part)."""
    results = _results(step)
    return content_text(results[0].get("content")) if results else ""


def subagent_refs(steps: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(label, trajectory_path) of each subagent an observation refers to, in order, once each."""
    found: list[tuple[str, str | None]] = []
    for step in steps:
        for result in _results(step):
            ref = result.get("subagent_trajectory_ref")
            for item in ref if isinstance(ref, list) else [ref]:
                if isinstance(item, str):
                    entry = (item, item)
                elif isinstance(item, dict):
                    path = item.get("trajectory_path")
                    label = path or item.get("session_id") or item.get("trajectory_id")
                    if not label:
                        continue
                    entry = (str(label), str(path) if path else None)
                else:
                    continue
                if entry not in found:
                    found.append(entry)
    return found


def tools_block(tool_definitions: list[Any]) -> str:
    return "<tools>\n" + "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tool_definitions) + "\n</tools>"


def context_messages(steps: list[dict[str, Any]], scrub: Callable[[str], str], first_episode: int, *,
                     tools: str | None = None, repair_think: bool = False) -> tuple[Context, int]:
    """One trajectory file's messages, each scrubbed once; returns the context and the next episode."""
    messages: list[Message] = []
    episode = first_episode
    tools_placed = tools is None
    for step in steps:
        source = step["source"]
        if source == "agent":
            counted = not step.get("is_copied_context")
            messages.append(Message("assistant", scrub(render_agent_turn(step, repair_think=repair_think)),
                                    episode if counted else None))
            episode += 1 if counted else 0
            observed = observation_text(step)
            if observed:
                messages.append(Message("user", scrub(observed), None))
            continue
        text = content_text(step.get("message"))
        if source == "system" and not tools_placed:
            text = f"{text}\n\n{tools}" if text else str(tools)
            tools_placed = True
        messages.append(Message(ROLE_OF_SOURCE[source], scrub(text), None))
    if not tools_placed:
        messages.insert(0, Message("system", scrub(str(tools)), None))
    return Context(messages), episode


def episode_conversations(contexts: list[Context], episodes: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(episode, conversation) pairs, each conversation ending with its episode's agent turn and
    holding the turns of its context before it. `last` yields only the final episode."""
    final = max((m.episode for c in contexts for m in c.messages if m.episode is not None), default=None)
    if final is None:
        return
    for context in contexts:
        for index, message in enumerate(context.messages):
            if message.episode is None:
                continue
            if episodes == "all" or message.episode == final:
                yield message.episode, [(m.role, m.content) for m in context.messages[:index + 1]]
            if message.episode == final:
                return


def instruction_of(contexts: list[Context], has_tools: bool, raw_system: str | None) -> str | None:
    """The first user message's text; with native tools, the system text (without the tools block)."""
    if has_tools and raw_system is not None:
        return raw_system
    for context in contexts[:1]:
        return next((m.content for m in context.messages if m.role == "user"), None)
    return None


def sharegpt(conversation: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The same turns as ShareGPT (`from`: system / human / gpt, `value`)."""
    return [(SHAREGPT_FROM[role], content) for role, content in conversation]
