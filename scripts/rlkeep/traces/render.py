"""ATIF trajectories -> trace-dataset conversations, rendered as Harbor 0.26's `traces export` does.

Facts this follows (Harbor 0.26's `harbor.utils.traces_utils`, checked row by row against its
exporter by tests/test_traces_vs_harbor.py):
- Each trajectory file is one context the model saw: trajectory.json, then each continuation
  after a context summarization, in the order `continued_trajectory_ref` chains them
  (rlkeep.traces.trial.continuation_chain). A row holds the steps of the file its
  episode lives in, so a post-summary row starts from what the model saw after the summary (the
  copied context and the summary), not from the whole history. Episodes keep counting across
  files; an agent step marked `is_copied_context` is context, not a new episode.
- Roles: `system` and `user` steps -> "user", `agent` steps -> "assistant"; an observation is a
  "user" turn after its agent turn except after the row's final agent turn. Consecutive
  same-role turns stay apart (nothing is merged).
- Media: a content list with an `image` or `audio` part in a step's message or an observation
  result makes Harbor refuse the whole export (MultimodalExportError) instead of dropping it
  from text rows; `media_field` finds it. Text-only content lists are read as above.
- An observation with several results joins every result's content with newlines; a content
  given as a list of parts contributes its first part's text.
- Agent turns: `<think>{reasoning}</think>`, the message and one
  `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` block per call, joined by newlines.
- Native tools (`agent.tool_definitions`): `<tools>\n{definitions as indented JSON}\n</tools>\n\n`
  goes before the text of each context's first system message (nothing is added when there is
  no system step); the definitions also fill `tool_definitions`.
- Subagents: every `agent/trajectory.<kind>.json` that is not a continuation is one row of its
  own holding the whole conversation, episode-0, `trace_source` `<kind>`; main rows say `main`.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Harbor 0.26 turns system steps into user turns (the task instruction from the user).
ROLE_OF_SOURCE = {"system": "user", "user": "user", "agent": "assistant"}
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}

Conversation = list[tuple[str, str]]  # (role, content) turns of one row


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
    """ATIF message / observation content as Harbor 0.26 reads it: a string as is; a list of
    content parts gives its first part's `text`; anything else its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], dict) and "text" in value[0]:
        text = value[0]["text"]
        return text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


MEDIA_PART_TYPES = ("image", "audio")


def _has_media(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(part, dict) and part.get("type") in MEDIA_PART_TYPES
                                             for part in content)


def media_field(step: dict[str, Any]) -> str | None:
    """Where the step holds an image or audio content part (`message`, `observation result N`), as
    Harbor 0.26 checks it; None for a text-only step."""
    if _has_media(step.get("message")):
        return "message"
    for position, result in enumerate(_results(step)):
        if _has_media(result.get("content")):
            return f"observation result {position + 1}"
    return None


def render_agent_turn(step: dict[str, Any]) -> str:
    """`<think>{reasoning}</think>`, the message, then one <tool_call> block per call, joined by
    newlines (empty parts left out). An orphaned `</think>` in the message gets its opening tag
    back, as Harbor does (vLLM returns the tokens after a `<think>` that was in the prompt)."""
    message = content_text(step.get("message"))
    reasoning = step.get("reasoning_content")
    pieces = [f"<think>{content_text(reasoning)}</think>"] if reasoning else []
    if message:
        if "</think>" in message and "<think>" not in message:
            message = "<think>" + message
        pieces.append(message)
    for call in step.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        payload = {"name": call.get("function_name"), "arguments": call.get("arguments", {})}
        pieces.append("<tool_call>\n" + json.dumps(payload, ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(pieces)


def _results(step: dict[str, Any]) -> list[dict[str, Any]]:
    observation = step.get("observation")
    if not isinstance(observation, dict):
        return []
    return [result for result in observation.get("results") or [] if isinstance(result, dict)]


def observation_text(step: dict[str, Any]) -> str | None:
    """Every observation result's content joined by newlines; None when no result has content."""
    parts = [content_text(result["content"]) for result in _results(step) if "content" in result]
    return "\n".join(parts) if parts else None


def subagent_source(rel: str) -> str | None:
    """The trace_source of a subagent trajectory file directly in agent/ (Harbor: every
    `trajectory.<kind>.json` that is not a continuation; the label is `<kind>`)."""
    name = rel.removeprefix("agent/")
    if "/" in name or ".cont-" in name or not (name.startswith("trajectory.") and name.endswith(".json")):
        return None
    kind = name[len("trajectory."):-len(".json")]
    return kind or None


def tools_block(tool_definitions: list[Any]) -> str:
    return "<tools>\n" + json.dumps(tool_definitions, ensure_ascii=False, indent=2) + "\n</tools>"


def context_messages(steps: list[dict[str, Any]], scrub: Callable[[str], str], first_episode: int, *,
                     tools: str | None = None) -> tuple[Context, int]:
    """One trajectory file's messages, each scrubbed once; returns the context and the next episode.
    The tools block goes before the text of the file's first system message (none is invented)."""
    messages: list[Message] = []
    episode = first_episode
    tools_placed = tools is None
    for step in steps:
        source = step["source"]
        if source == "agent":
            counted = not step.get("is_copied_context")
            messages.append(Message("assistant", scrub(render_agent_turn(step)), episode if counted else None))
            episode += 1 if counted else 0
            observed = observation_text(step)
            if observed is not None:
                messages.append(Message("user", scrub(observed), None))
            continue
        text = content_text(step.get("message"))
        if source == "system" and not tools_placed:
            text = f"{tools}\n\n{text}"
            tools_placed = True
        messages.append(Message(ROLE_OF_SOURCE[source], scrub(text), None))
    return Context(messages), episode


def episode_conversations(contexts: list[Context], episodes: str) -> Iterator[tuple[int, Conversation]]:
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


def whole_conversation(contexts: list[Context]) -> Iterator[tuple[int, Conversation]]:
    """A subagent trajectory as one row (episode 0): every turn, the last observation included."""
    turns = [(m.role, m.content) for c in contexts for m in c.messages]
    if any(role == "assistant" for role, _ in turns):
        yield 0, turns


def sharegpt(conversation: Conversation) -> Conversation:
    """The same turns as ShareGPT (`from`: system / human / gpt, `value`)."""
    return [(SHAREGPT_FROM[role], content) for role, content in conversation]
