"""Reading one trial: result.json (skimmed when large), the ATIF trajectory files, the verifier
output and the subagent trajectories, into metadata columns and contexts (`TrialRows`), or a
`MalformedTrial` naming the reason it is counted under, or `MediaContent` (Harbor refuses the
whole export over an image or audio part; the caller decides with the trial's success).

Continuations are read as Harbor 0.26 reads them: from `agent/trajectory.json`, each file's
`continued_trajectory_ref` (relative to agent/) names the next; the chain ends at a file without
one or at a reference to a file that is not there (`continuation_missing` in the repairs).
Continuation files nobody references are not read (`continuation_unreferenced`); a chain that
comes back to a file it read is malformed (`continuation_cycle`), where Harbor would loop."""
from __future__ import annotations

import json
import posixpath
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rlkeep.jsonskim import SkimError, pick_members
from rlkeep.traces.render import Context, context_messages, media_field, subagent_source, tools_block
from rlkeep.traces.schema import MAIN_SOURCE
from rlkeep.traces.trials import MAIN_TRAJECTORY, RESULT, VERIFIER_OUTPUT, TrialContent


class MalformedTrial(Exception):
    """A trial that cannot become rows; `reason` is the manifest key it is counted under."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class MediaContent(Exception):
    """A trajectory step with an image or audio content part; `success` is the trial's, so that a
    trial the filter leaves out does not stop the export (Harbor filters before it reads)."""

    def __init__(self, rel: str, step: int, field: str):
        super().__init__(f"{rel} step {step} {field}: an image or audio content part")
        self.success = False


def _read_json(data: bytes, rel: str, reason: str, repairs: Counter[str]) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        repairs["invalid_utf8_file"] += 1
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedTrial(reason, f"{rel} line {error.lineno}: {error.msg}") from error


# The members of result.json the export reads; anything else (rollout_details, agent output:
# possibly hundreds of MB) is skipped without being decoded when the file is large.
_RESULT_MEMBERS: dict[str, Any] = {name: None for name in (
    "trial_name", "task_name", "started_at", "verifier_result", "exception_info", "agent_info", "config")}
SKIM_RESULT_ABOVE_BYTES = 4 << 20


def _read_result(data: bytes, repairs: Counter[str]) -> Any:
    """result.json as a dict of the members the export reads. A large file is skimmed (memory:
    the picked members, not about three times the file); if skimming refuses it, the full parse
    decides, with its repairs and its error message."""
    if len(data) > SKIM_RESULT_ABOVE_BYTES:
        try:
            return pick_members(data, _RESULT_MEMBERS, RESULT)
        except (SkimError, ValueError):
            pass
    return _read_json(data, RESULT, "invalid_json_result", repairs)


def _reward_text(result: dict[str, Any]) -> str | None:
    """Harbor 0.26's reward text: `verifier_result.rewards["reward"]` as `str(float(value))`, or
    the value's text when it is not a number; None when there is no such reward."""
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    value = rewards.get("reward") if isinstance(rewards, dict) else None
    if value is None:
        return None
    try:
        return str(float(value))
    except (TypeError, ValueError):
        return str(value)


def _is_success(result_text: str | None) -> bool:
    """Harbor's success rule on the `result` column: a number above zero (an exception is not)."""
    try:
        return result_text is not None and float(result_text) > 0
    except ValueError:
        return False


def _exception_type(result: dict[str, Any]) -> str | None:
    info = result.get("exception_info")
    kind = info.get("exception_type") if isinstance(info, dict) else None
    return str(kind) if kind else None


def _trajectory_doc(rel: str, data: bytes, repairs: Counter[str]) -> dict[str, Any]:
    doc = _read_json(data, rel, "invalid_json_trajectory", repairs)
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if not (isinstance(version, str) and version.startswith("ATIF-") and isinstance(doc.get("steps"), list)):
        raise MalformedTrial("not_atif", f"{rel} has no ATIF schema_version and steps list")
    for position, step in enumerate(doc["steps"]):
        if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
            raise MalformedTrial("not_atif", f"{rel} step {position + 1} has no valid source")
    return doc


@dataclass
class TrialRows:
    """A readable trial: its metadata columns and, per trace source, its contexts."""

    success: bool
    columns: dict[str, str | None]
    sources: list[tuple[str, list[Context], dict[str, str | None]]]  # (trace_source, contexts, overrides)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _run_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Harbor 0.26's run metadata from result.json (its fallbacks, in its order)."""
    config = _mapping(result.get("config"))
    agent_cfg = _mapping(config.get("agent"))
    agent_info = _mapping(result.get("agent_info"))
    model_info = _mapping(agent_info.get("model_info"))
    return {
        "agent": agent_cfg.get("name") or agent_info.get("name") or config.get("agent_name") or result.get("agent_name"),
        "model": (model_info.get("name") or agent_cfg.get("model_name") or agent_info.get("model_name")
                  or config.get("engine")),
        "model_provider": (model_info.get("provider") or agent_cfg.get("provider") or agent_info.get("provider")
                           or config.get("engine")),
        "run_id": (config.get("job_id") or config.get("job_name") or result.get("job_id") or result.get("run_id")
                   or result.get("trial_name")),
    }


class _Contexts:
    """Turns the ATIF documents of one agent (main or subagent) into contexts."""

    def __init__(self, scrub: Callable[[str], str], repairs: Counter[str]):
        self.scrub, self.repairs = scrub, repairs

    def build(self, documents: Iterable[tuple[str, dict[str, Any]]]) -> tuple[list[Context], dict[str, Any]]:
        """(contexts, first file's agent block) of ATIF documents already checked by _trajectory_doc."""
        contexts: list[Context] = []
        agent: dict[str, Any] = {}
        episode = 0
        for index, (rel, doc) in enumerate(documents):
            file_agent = _mapping(doc.get("agent"))
            if index == 0:
                agent = file_agent
                if not doc["steps"]:
                    raise MalformedTrial("empty_steps", rel)
            for position, step in enumerate(doc["steps"]):
                if (field := media_field(step)) is not None:
                    raise MediaContent(rel, position + 1, field)
            definitions = file_agent.get("tool_definitions")
            tools = tools_block(definitions) if isinstance(definitions, list) and definitions else None
            context, episode = context_messages(doc["steps"], self.scrub, episode, tools=tools)
            contexts.append(context)
        return contexts, agent


def continuation_chain(trial: TrialContent, repairs: Counter[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """trajectory.json, then each file its `continued_trajectory_ref` names, parsed (see the module
    docstring for where the chain ends)."""
    rel: str | None = MAIN_TRAJECTORY
    seen: set[str] = set()
    while rel is not None:
        if rel in seen:
            raise MalformedTrial("continuation_cycle", f"{rel} is referenced again")
        seen.add(rel)
        doc = _trajectory_doc(rel, trial.files[rel], repairs)
        yield rel, doc
        rel = _referenced(doc.get("continued_trajectory_ref"), trial, repairs)
    unreferenced = [name for name in trial.files
                    if name.startswith("agent/trajectory.cont-") and "/" not in name[6:] and name not in seen]
    if unreferenced:
        repairs["continuation_unreferenced"] += len(unreferenced)


def _referenced(ref: Any, trial: TrialContent, repairs: Counter[str]) -> str | None:
    if not ref:
        return None
    rel = posixpath.normpath(posixpath.join("agent", str(ref)))
    if not rel.startswith("agent/") or rel not in trial.files:  # only trajectories in agent/ are read
        repairs["continuation_missing"] += 1
        return None
    return rel


def _subagent_sources(trial: TrialContent, builder: _Contexts, repairs: Counter[str],
                      run_model: Any) -> list[tuple[str, list[Context], dict[str, str | None]]]:
    """One source per `agent/trajectory.<kind>.json` (sorted by file name), labelled `<kind>`."""
    sources = []
    for rel in sorted(trial.files):
        kind = subagent_source(rel)
        if kind is None:
            continue
        try:
            contexts, agent = builder.build([(rel, _trajectory_doc(rel, trial.files[rel], repairs))])
        except MalformedTrial:
            repairs["subagent_trajectory_unreadable"] += 1
            continue
        model = agent.get("model_name") or run_model
        sources.append((kind, contexts, {"model": None if model is None else builder.scrub(str(model))}))
    return sources


def instruction_text(trial: TrialContent) -> str | None:
    """Harbor's `instruction`: in the first (by name) `agent/trajectory*.json` that is not a
    summarization, the first step whose message is a non-blank string, stripped."""
    names = sorted(rel for rel in trial.files if rel.startswith("agent/trajectory") and "/" not in rel[6:]
                   and rel.endswith(".json") and ".summarization" not in rel)
    if not names:
        return None
    try:
        steps = json.loads(trial.files[names[0]]).get("steps")
    except (ValueError, AttributeError):
        return None
    for step in steps if isinstance(steps, list) else []:
        message = step.get("message") if isinstance(step, dict) else None
        if isinstance(message, str) and message.strip():
            return message.strip()
    return None


def read_trial(trial: TrialContent, scrub: Callable[[str], str], repairs: Counter[str]) -> TrialRows:
    """Parse one trial into metadata and contexts, or raise MalformedTrial with the reason, or
    MediaContent carrying the trial's success."""
    if trial.result is None:
        raise MalformedTrial("missing_result")
    result = _read_result(trial.result, repairs)
    if not isinstance(result, dict):
        raise MalformedTrial("invalid_json_result", "result.json is not an object")
    # Harbor 0.26: an exception wins over a reward (a timed-out trial that was still verified).
    result_text = _exception_type(result) or _reward_text(result)
    try:
        return _trial_rows(trial, result, result_text, scrub, repairs)
    except MediaContent as found:
        found.success = _is_success(result_text)
        raise


def _trial_rows(trial: TrialContent, result: dict[str, Any], result_text: str | None,
                scrub: Callable[[str], str], repairs: Counter[str]) -> TrialRows:
    if MAIN_TRAJECTORY not in trial.files:
        raise MalformedTrial("missing_trajectory")
    builder = _Contexts(scrub, repairs)
    contexts, agent = builder.build(continuation_chain(trial, repairs))
    if not any(m.episode is not None for c in contexts for m in c.messages):
        raise MalformedTrial("no_agent_steps")
    if contexts[0].messages[0].role == "assistant":
        raise MalformedTrial("no_user_turn")
    run = _run_metadata(result)
    columns = _metadata_columns(trial, result, run, agent, scrub)
    columns["result"] = None if result_text is None else scrub(result_text)
    run_agent = None if run["agent"] is None else scrub(str(run["agent"]))
    subagents = [(kind, found, dict(overrides, agent=run_agent, tool_definitions=None))
                 for kind, found, overrides in _subagent_sources(trial, builder, repairs, run["model"])]
    sources = [(MAIN_SOURCE, contexts, {})] + subagents
    return TrialRows(success=_is_success(columns["result"]), columns=columns, sources=sources)


def _metadata_columns(trial: TrialContent, result: dict[str, Any], run: dict[str, Any], agent: dict[str, Any],
                      scrub: Callable[[str], str]) -> dict[str, str | None]:
    """Every column but `result` and the conversations, scrubbed."""
    trial_name = result.get("trial_name") or trial.name
    metadata = {
        # Main rows name the trajectory's agent and model; subagent rows the run's agent.
        "agent": agent.get("name") or run["agent"],
        "model": agent.get("model_name") or run["model"],
        "model_provider": run["model_provider"],
        "date": result.get("started_at"),
        "task": result.get("task_name"),
        "run_id": run["run_id"] or trial_name,  # SkyRL: job_id is null, so the trial name
        "trial_name": trial_name,
        "instruction": instruction_text(trial),
    }
    columns: dict[str, str | None] = {key: None if value is None else scrub(str(value))
                                      for key, value in metadata.items()}
    verifier_parts = [trial.files[rel].decode("utf-8", errors="replace")
                      for rel in VERIFIER_OUTPUT if rel in trial.files]
    columns["verifier_output"] = scrub("".join(verifier_parts)) if verifier_parts else None
    definitions = agent.get("tool_definitions")
    has_tools = isinstance(definitions, list) and bool(definitions)
    columns["tool_definitions"] = json.dumps(scrub_strings(definitions, scrub), ensure_ascii=False) if has_tools else None
    return columns


def scrub_strings(value: Any, scrub: Callable[[str], str]) -> Any:
    """A JSON value with every string in it scrubbed (keys stay: they name schema fields), so the
    redacted definitions are still the same structure."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [scrub_strings(item, scrub) for item in value]
    if isinstance(value, dict):
        return {key: scrub_strings(item, scrub) for key, item in value.items()}
    return value


def keep_trial(success: bool, filter: str) -> bool:
    return filter == "none" or (filter == "success") == success
