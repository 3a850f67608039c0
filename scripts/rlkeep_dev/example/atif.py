"""Terminus-2 agent artifacts of one trial: the ATIF v1.6 trajectory, the tmux pane capture and
the asciinema recording (docs/reference.md, formats §3.3)."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from . import clock
from .context import SERVED_MODEL

SYSTEM_PROMPT = (
    "You are an AI assistant tasked with solving command-line tasks in a Linux environment. "
    "You will be given a task description and the output from previously executed commands. "
    "Your goal is to solve the task by providing batches of shell commands.\n\n"
    "Format your response as JSON with the following structure: analysis, plan, commands, task_complete."
)

COMMANDS = [
    ("ls -la\n", "total 16\ndrwxr-xr-x 1 root root 4096 Mar 30 17:04 .\ndrwxr-xr-x 1 root root 4096 Mar 30 17:04 ..\n"
                 "-rw-r--r-- 1 root root  812 Mar 30 17:04 README.md\n-rw-r--r-- 1 root root 2231 Mar 30 17:04 input.txt"),
    ("cat README.md\n", "# Task\nRead input.txt and write the answer to /app/answer.txt."),
    ("python3 -c 'import sys; print(sys.version)'\n", "3.11.13 (main, Jun  4 2025, 08:57:29) [GCC 12.2.0]"),
    ("cat > solution.py << 'EOF'\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\nEOF\n", ""),
    ("python3 solution.py < input.txt > answer.txt && cat answer.txt\n", "42"),
    ("grep -rn 'TODO' src/ | head\n", "src/app.py:17:    # TODO: handle empty input\nsrc/app.py:88:    # TODO: close file"),
    ("pytest -q tests/ 2>&1 | tail -3\n", "....F.\n1 failed, 5 passed in 0.41s"),
    ("sed -i 's/return None/return []/' src/app.py\n", ""),
    ("git status --short\n", " M src/app.py\n?? solution.py"),
    ("pip install -q numpy==2.4.6\n", "WARNING: Running pip as the 'root' user can result in broken permissions."),
]


@dataclass
class TrajectoryPlan:
    session_id: str
    instruction: str
    turns: int
    start: datetime
    turn_seconds: float
    completes: bool                                 # last agent step calls mark_task_complete
    planted_keystrokes: dict[int, str] = field(default_factory=dict)   # turn -> command
    planted_output: dict[int, str] = field(default_factory=dict)       # turn -> terminal output


@dataclass
class TurnTokens:
    prompt_tokens: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]


def turn_tokens(rng: random.Random, turn: int, base_prompt: int) -> TurnTokens:
    length = rng.randint(12, 40)
    return TurnTokens(
        prompt_tokens=base_prompt + turn * rng.randint(300, 900),
        prompt_ids=[rng.randrange(151643) for _ in range(rng.randint(8, 24))],
        completion_ids=[rng.randrange(151643) for _ in range(length - 1)] + [151645],
        logprobs=[round(-abs(rng.gauss(0.0, 0.35)), 4) for _ in range(length)],
    )


def _agent_step(rng: random.Random, step_id: int, turn: int, plan: TrajectoryPlan, tokens: TurnTokens,
                final: bool) -> dict:
    moment = plan.start + timedelta(seconds=plan.turn_seconds * (turn + 1))
    keystrokes, output = rng.choice(COMMANDS)
    keystrokes = plan.planted_keystrokes.get(turn, keystrokes)
    output = plan.planted_output.get(turn, output)
    if final and plan.completes:
        call = {"tool_call_id": f"call_{turn}_1", "function_name": "mark_task_complete", "arguments": {}}
        result = "Task marked as complete."
        message = "Analysis: the answer is written and verified.\nPlan: mark the task complete."
    else:
        call = {"tool_call_id": f"call_{turn}_1", "function_name": "bash_command",
                "arguments": {"keystrokes": keystrokes, "duration": rng.choice([0.1, 0.5, 1.0, 5.0])}}
        result = f"New Terminal Output:\n\n{output}\nroot@sandbox:/app# " if output else "New Terminal Output:\n\nroot@sandbox:/app# "
        message = f"Analysis: step {turn + 1} of the investigation.\nPlan: run `{keystrokes.splitlines()[0][:40]}`."
    return {
        "step_id": step_id,
        "timestamp": clock.iso_offset(moment),
        "source": "agent",
        "model_name": f"hosted_vllm/{SERVED_MODEL}",
        "message": message,
        "reasoning_content": rng.choice(["Check the inputs first.", "The tests point at src/app.py.",
                                         "A direct solution should work.", "Verify before finishing."]),
        "tool_calls": [call],
        "observation": {"results": [{"content": result}]},
        "metrics": {
            "prompt_tokens": tokens.prompt_tokens,
            "completion_tokens": len(tokens.completion_ids),
            "completion_token_ids": tokens.completion_ids,
            "logprobs": tokens.logprobs,
        },
    }


def trajectory(rng: random.Random, plan: TrajectoryPlan, tokens: list[TurnTokens],
               *, first_turn: int = 0, continued_ref: str | None = None, copied_prefix: list[dict] | None = None,
               handoff: str | None = None) -> dict:
    """An ATIF-v1.6 document for turns [first_turn, first_turn + len(tokens))."""
    steps: list[dict] = [{"step_id": 1, "source": "user", "message": f"{SYSTEM_PROMPT}\n\nTask Description:\n"
                          f"{plan.instruction}\n\nCurrent terminal state:\nroot@sandbox:/app# "}]
    if copied_prefix:
        steps[0]["is_copied_context"] = True
        for copied in copied_prefix:
            steps.append({**copied, "step_id": len(steps) + 1, "is_copied_context": True})
    if handoff:
        steps.append({"step_id": len(steps) + 1, "source": "user", "message": handoff})
    last_turn = first_turn + len(tokens) - 1
    for offset, turn_tokens_ in enumerate(tokens):
        turn = first_turn + offset
        final = turn == last_turn and continued_ref is None
        steps.append(_agent_step(rng, len(steps) + 1, turn, plan, turn_tokens_, final))
    document = {
        "schema_version": "ATIF-v1.6",
        "session_id": plan.session_id,
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": f"hosted_vllm/{SERVED_MODEL}",
                  "extra": {"parser": "json"}},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(t.prompt_tokens for t in tokens),
            "total_completion_tokens": sum(len(t.completion_ids) for t in tokens),
            "total_cached_tokens": 0,
        },
    }
    if continued_ref:
        document["continued_trajectory_ref"] = continued_ref
    return document


def pane_text(rng: random.Random, target_bytes: int) -> str:
    """A tmux capture: prompts, commands and build noise, padded to about `target_bytes`."""
    lines = ["root@sandbox:/app# ls", "README.md  input.txt  src  tests"]
    for keystrokes, output in rng.sample(COMMANDS, 4):
        lines.append("root@sandbox:/app# " + keystrokes.splitlines()[0])
        lines.extend(output.splitlines())
    text = "\n".join(lines) + "\n"
    if len(text) >= target_bytes:
        return text
    noise: list[str] = []
    size, index = len(text), 0
    salt = rng.randrange(1 << 30)
    while size < target_bytes:
        module = (index * 7919 + salt) % 997
        line = (f"[{index:07d}] cc -O2 -fPIC -Iinclude -c src/mod_{module:03d}.c -o build/mod_{module:03d}.o "
                f"# {(index * 2654435761 + salt) & 0xFFFFFFFF:08x}")
        noise.append(line)
        size += len(line) + 1
        index += 1
    return text + "\n".join(noise) + "\n"


def recording_cast(rng: random.Random, start: datetime, target_bytes: int) -> str:
    """An asciinema v2 recording: a JSON header line, then `[t, "o", text]` events."""
    header = {"version": 2, "width": 160, "height": 40, "timestamp": int(start.timestamp()),
              "env": {"SHELL": "/bin/bash", "TERM": "tmux-256color"}}
    lines = [json.dumps(header)]
    size, moment, index = len(lines[0]), 0.0, 0
    while size < target_bytes or index < 6:
        keystrokes, output = COMMANDS[index % len(COMMANDS)]
        moment += rng.uniform(0.05, 2.5)
        event = json.dumps([round(moment, 6), "o", f"root@sandbox:/app# {keystrokes}{output}\r\n"])
        lines.append(event)
        size += len(event) + 1
        index += 1
    return "\n".join(lines) + "\n"
