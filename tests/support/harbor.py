"""Builders of realistic Harbor trial folders, as SkyRL's Harbor generator leaves them.

Layout and field shapes follow docs/reference.md, formats §3: flat trial dirs
named `{task[:32].rstrip('_-')}__{7-char shortuuid}`, `result.json` (indent 4) as the
completion marker, `config.json`, ATIF `agent/trajectory.json` (v1.6 or v1.8, indent 2, null
fields omitted) with optional `trajectory.cont-N.json` continuations, `verifier/` output,
`trial.log`, a tmux `*.pane` capture and an asciinema `recording.cast`.

Everything is a pure function of its arguments (`seed` included): the same call writes the
same bytes. `trial_files()` returns the files of one trial as {relative path: bytes};
`write_trial()` writes them under a root; `write_trace_tree()` and `write_trace_tar()` write
many trials (the tar the way the sync step does: member names relative to the trace root, in
sorted order, regular files only, fixed metadata).

Outcomes (`OUTCOMES`):
  success      reward 1.0
  partial      reward 0.5 (a partial-credit verifier)
  failure      reward 0.0
  exception    AgentTimeoutError, `verifier_result: null`, a truncated trajectory
  setup_error  AgentSetupTimeoutError before the agent ran: no agent/trajectory.json at all
  incomplete   the trial never finished: agent/ exists, no result.json
"""
from __future__ import annotations

import io
import json
import random
import tarfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path

OUTCOMES = ("success", "partial", "failure", "exception", "setup_error", "incomplete")
REWARDS = {"success": 1.0, "partial": 0.5, "failure": 0.0}
ATIF_VERSIONS = ("ATIF-v1.6", "ATIF-v1.8")
SHORTUUID_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
SERVED_MODEL = "Qwen3-8B"
EPOCH = datetime(2026, 3, 30, 17, 0, 0, tzinfo=timezone.utc)

TASK_FAMILIES = (
    "codecontests", "swebench-django__django", "terminal-bench-fix-git", "sympy-issue",
    "build-cython-ext", "train-fasttext", "count-dataset-tokens", "regex-log-parsing",
)

SYSTEM_PROMPT = (
    "You are an AI assistant tasked with solving command-line tasks in a Linux environment. "
    "You will be given a task description and the output from previously executed commands. "
    "Your goal is to solve the task by providing batches of shell commands.\n\n"
    "Format your response as JSON with the following structure:\n\n"
    '{\n  "analysis": "Analyze the current state based on the terminal output provided.",\n'
    '  "plan": "Describe your plan for the next steps.",\n'
    '  "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}],\n'
    '  "task_complete": true\n}\n\n'
    "Required fields: analysis, plan, commands. The keystrokes are sent verbatim to the "
    "terminal; include a trailing newline to execute a command. Durations are in seconds; "
    "use short durations for fast commands and poll long-running ones instead of waiting. "
    "Set task_complete only when you are sure the task is solved: your solution will be "
    "graded once and you will not be able to make further changes.\n\n"
)

_WORDS = (
    "the a to of and in is it that for on with as file test build error output line value "
    "function return import module python package install run command directory path config "
    "check fix update result expected actual failed passed assert list dict string int none "
    "true false self class def print data input read write open close json parse token model "
    "server request response status code process thread memory cache index key user system "
    "shell bash script cd ls cat grep sed awk make pip venv git commit diff patch branch "
    "merge log trace debug warning info note todo next then first second finally because "
    "should would could might need want try again now done solution approach step plan "
    "analysis verify compile link library header include struct pointer array loop count "
    "sum max min sort filter map reduce iterate recursion edge case boundary integer overflow"
).split()

_SHELL_COMMANDS = (
    "ls -la", "cat solution.py", "python3 solution.py < input.txt", "pytest -q tests/",
    "pip install -r requirements.txt", "git status", "git diff", "grep -rn 'def main' .",
    "make -j2", "sed -n '1,40p' src/main.c", "find . -name '*.py' | head", "wc -l data.csv",
)


@dataclass(frozen=True)
class TrialSummary:
    """What a builder wrote, for tests to derive expectations from (never from the code under test)."""

    name: str
    task: str
    outcome: str
    n_agent_steps: int  # agent turns in the whole trajectory (all files); 0 when there is none
    reward: float | None
    exception_type: str | None
    has_result: bool
    has_trajectory: bool


@lru_cache(maxsize=1)
def _corpus() -> str:
    """A fixed 256 KiB text from which messages are sliced: generating text word by word is
    far too slow for benchmark-sized trees."""
    rng = random.Random(1234)
    words: list[str] = []
    size = 0
    while size < 256 * 1024:
        word = rng.choice(_WORDS)
        if rng.random() < 0.08:
            word += rng.choice((".", ",", ":", ".\n"))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def _text(rng: random.Random, low: int, high: int) -> str:
    corpus = _corpus()
    length = rng.randint(low, high)
    start = rng.randrange(0, len(corpus) - length - 1)
    start = corpus.find(" ", start) + 1
    return corpus[start:start + length].strip() or "ok"


def make_trial_name(task: str, rng: random.Random) -> str:
    suffix = "".join(rng.choice(SHORTUUID_ALPHABET) for _ in range(7))
    return f"{task[:32].rstrip('_-')}__{suffix}"


def make_task_name(rng: random.Random) -> str:
    return f"{rng.choice(TASK_FAMILIES)}-{rng.randint(1, 9999)}"


def _iso(moment: datetime, *, zone: bool = True) -> str:
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text + "Z" if zone else text


def _noisy_terminal_output(rng: random.Random, command: str, noise: bool) -> str:
    lines = [f"root@sandbox:/app# {command}"]
    for _ in range(rng.randint(1, 12)):
        lines.append(_text(rng, 20, 110))
    body = "\n".join(lines)
    if noise and rng.random() < 0.5:
        # Colours, bracketed-paste toggles and a carriage-return progress bar, as tmux shows them.
        body = (
            "\x1b[?2004h" + body.replace("root@sandbox", "\x1b[01;32mroot@sandbox\x1b[00m", 1)
            + "\nDownloading  10%\rDownloading  55%\rDownloading 100%\r\n"
            + "\x1b[200~echo pasted\x1b[201~\n\x1b[31mERROR\x1b[0m: " + _text(rng, 10, 60)
        )
    return "New Terminal Output:\n\n" + body + "\nroot@sandbox:/app# "


def _agent_step(rng: random.Random, step_id: int, episode: int, moment: datetime, *,
                final: bool, noise: bool) -> dict:
    command = rng.choice(_SHELL_COMMANDS)
    analysis = _text(rng, 60, 300)
    plan = _text(rng, 40, 250)
    message = f"Analysis: {analysis}\nPlan: {plan}"
    step: dict = {
        "step_id": step_id,
        "timestamp": moment.isoformat(),
        "source": "agent",
        "model_name": f"hosted_vllm/{SERVED_MODEL}",
        "message": message,
        "reasoning_content": _text(rng, 100, 1200),
    }
    calls = [{
        "tool_call_id": f"call_{episode}_1",
        "function_name": "bash_command",
        "arguments": {"keystrokes": command + "\n", "duration": rng.choice((0.1, 1.0, 5.0))},
    }]
    if final:
        calls.append({"tool_call_id": f"call_{episode}_2", "function_name": "mark_task_complete",
                      "arguments": {}})
    step["tool_calls"] = calls
    step["observation"] = {"results": [{"source_call_id": f"call_{episode}_1",
                                        "content": _noisy_terminal_output(rng, command, noise)}]}
    prompt_tokens = 1200 + 180 * episode
    step["metrics"] = {"prompt_tokens": prompt_tokens, "completion_tokens": rng.randint(40, 600),
                       "cached_tokens": 0}
    return step


def _token_ids(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(151000) for _ in range(count)]


def _dump_json(obj: object, indent: int) -> bytes:
    text = json.dumps(obj, indent=indent, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: Harbor's writer escapes it as \udXXX
        return json.dumps(obj, indent=indent).encode("ascii")


def _trajectory_docs(rng: random.Random, *, atif_version: str, instruction: str, n_steps: int,
                     started: datetime, continuation_after: int | None, noise: bool,
                     plant_text: str | None, plant_step: int, surrogate: bool) -> list[dict]:
    """The ATIF documents of one trial: trajectory.json, then each continuation file."""
    agent = {"name": "terminus-2", "version": "2.0.0", "model_name": f"hosted_vllm/{SERVED_MODEL}",
             "extra": {"parser": "json"}}
    user_step = {"step_id": 1, "source": "user", "message": SYSTEM_PROMPT + "Task description:\n" + instruction}
    docs: list[dict] = []
    steps: list[dict] = [user_step]
    moment = started + timedelta(seconds=20)
    for episode in range(n_steps):
        if continuation_after is not None and episode == continuation_after:
            docs.append({"steps": steps})
            summary = "Summary of the work so far: " + _text(rng, 200, 600)
            steps = [dict(user_step, is_copied_context=True),
                     {"step_id": 2, "source": "user", "message": summary}]
        moment += timedelta(seconds=rng.randint(3, 40))
        step = _agent_step(rng, len(steps) + 1, episode, moment, final=episode == n_steps - 1, noise=noise)
        if plant_text is not None and episode == plant_step:
            step["observation"]["results"][0]["content"] += f"\nexport HF_TOKEN={plant_text}\n"
            step["message"] += f"\nI will use the token {plant_text} to download."
        if surrogate and episode == 0:
            step["message"] += " broken emoji \ud83d here"
        steps.append(step)
    docs.append({"steps": steps})
    out = []
    for index, doc in enumerate(docs):
        body: dict = {"schema_version": atif_version}
        if atif_version == "ATIF-v1.6":  # session_id is optional from v1.7 on
            body["session_id"] = "".join(rng.choice("0123456789abcdef") for _ in range(32))
        body["agent"] = agent
        body["steps"] = doc["steps"]
        agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
        body["final_metrics"] = {
            "total_prompt_tokens": sum(s["metrics"]["prompt_tokens"] for s in agent_steps),
            "total_completion_tokens": sum(s["metrics"]["completion_tokens"] for s in agent_steps),
            "total_cached_tokens": 0,
        }
        if index < len(docs) - 1:
            body["continued_trajectory_ref"] = f"trajectory.cont-{index + 1}.json"
        out.append(body)
    return out


def trial_files(name: str, *, seed: int, outcome: str = "success", n_steps: int = 4,
                task: str | None = None, atif_version: str = "ATIF-v1.6",
                continuation_after: int | None = None, reward_format: str = "txt",
                pane: bool = True, cast: bool = False, noise: bool = True,
                plant_text: str | None = None, plant_step: int = 0, surrogate: bool = False,
                rollout_tokens: int = 16) -> dict[str, bytes]:
    """The files of one trial, {path relative to the trial dir: bytes}.

    n_steps: agent turns (the trajectory has one user step before them). continuation_after:
    the number of turns kept in trajectory.json before the agent continues in
    trajectory.cont-1.json (after a context summarization). plant_text: appended to the
    observation and the message of turn `plant_step` (e.g. a fake credential).
    rollout_tokens: token ids per turn in result.json's rollout_details.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
    if atif_version not in ATIF_VERSIONS:
        raise ValueError(f"unknown ATIF version {atif_version!r}")
    rng = random.Random(f"{seed}:{name}")
    task = task or name.rsplit("__", 1)[0]
    started = EPOCH + timedelta(seconds=rng.randint(0, 7 * 86400))
    instruction = f"Solve {task}: " + _text(rng, 200, 900)
    files: dict[str, bytes] = {}
    agent_ran = outcome != "setup_error"
    turns = 0
    if agent_ran:
        turns = max(1, n_steps if outcome != "exception" else max(1, n_steps // 2))
        cont = continuation_after if continuation_after is not None and 0 < continuation_after < turns else None
        docs = _trajectory_docs(rng, atif_version=atif_version, instruction=instruction, n_steps=turns,
                                started=started, continuation_after=cont, noise=noise,
                                plant_text=plant_text, plant_step=min(plant_step, turns - 1),
                                surrogate=surrogate)
        for index, doc in enumerate(docs):
            file_name = "trajectory.json" if index == 0 else f"trajectory.cont-{index}.json"
            files[f"agent/{file_name}"] = _dump_json(doc, 2)
        if pane:
            files["agent/terminus_2.pane"] = (
                "\x1b[?2004hroot@sandbox:/app# " + "\n".join(_text(rng, 40, 120) for _ in range(60)) + "\n"
            ).encode()
        if cast:
            header = {"version": 2, "width": 160, "height": 40, "timestamp": int(started.timestamp())}
            events = [json.dumps([round(i * 0.37, 3), "o", _text(rng, 5, 60)]) for i in range(40)]
            files["agent/recording.cast"] = (json.dumps(header) + "\n" + "\n".join(events) + "\n").encode()

    config = {
        "task": {"path": f"/data/harbor/tasks/{task}", "git_url": None, "overwrite": False},
        "trial_name": name,
        "trials_dir": "/mnt/local_storage/trials_run",
        "timeout_multiplier": 1.0,
        "agent": {"name": "terminus-2", "model_name": f"hosted_vllm/{SERVED_MODEL}",
                  "kwargs": {"max_turns": 32, "collect_rollout_details": True,
                             "session_id": "".join(rng.choice("0123456789abcdef") for _ in range(32)),
                             "llm_kwargs": {"extra_body": {"cache_salt": f"{SERVED_MODEL}@{rng.randint(1, 40)}"}}}},
        "environment": {"type": "docker", "force_build": False, "delete": True},
        "verifier": {"override_timeout_sec": None},
        "job_id": None,
    }
    files["config.json"] = _dump_json(config, 4)

    finished = started + timedelta(seconds=30 + 25 * turns)
    reward = REWARDS.get(outcome)
    log_lines = [f"{_iso(started)} INFO Starting trial {name}", f"{_iso(started)} INFO Environment ready"]
    if reward is not None:
        files[f"verifier/{'reward.txt' if reward_format == 'txt' else 'reward.json'}"] = (
            f"{reward:g}\n".encode() if reward_format == "txt" else json.dumps({"reward": reward}).encode()
        )
        passed = "\x1b[32mPASSED\x1b[0m" if reward >= 1 else "\x1b[31mFAILED\x1b[0m"
        files["verifier/test-stdout.txt"] = (
            "============================= test session starts ==============================\n"
            f"collected 3 items\n\ntests/test_outputs.py::test_solution {passed}\n"
            + _text(rng, 40, 300) + "\n"
        ).encode()
        stderr = "" if reward >= 1 else "Traceback (most recent call last):\n  " + _text(rng, 20, 120) + "\n"
        files["verifier/test-stderr.txt"] = stderr.encode()
        summary = {"tests": 3, "passed": 3 if reward >= 1 else 1}
        files["verifier/ctrf.json"] = json.dumps({"results": {"summary": summary}}).encode()
        log_lines.append(f"{_iso(finished)} INFO Verifier reward {reward}")

    exception_info = None
    if outcome in ("exception", "setup_error"):
        kind, message = (("AgentTimeoutError", "Agent execution timed out after 1200.0 seconds")
                         if outcome == "exception" else
                         ("AgentSetupTimeoutError", "Agent setup timed out after 360.0 seconds"))
        exception_info = {"exception_type": kind, "exception_message": message,
                          "exception_traceback": ("Traceback (most recent call last):\n"
                                                  f"  File \"trial.py\", line 212\n{kind}: {message}\n"),
                          "occurred_at": _iso(finished, zone=False)}
        files["exception.txt"] = exception_info["exception_traceback"].encode()
        log_lines.append(f"{_iso(finished)} ERROR {kind}: {message}")
    files["trial.log"] = ("\n".join(log_lines) + "\n").encode()

    if outcome != "incomplete":
        result = {
            "id": "-".join("".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)),
            "task_name": task,
            "trial_name": name,
            "trial_uri": f"file:///mnt/local_storage/trials_run/{name}",
            "task_id": {"path": f"/data/harbor/tasks/{task}"},
            "source": None,
            "task_checksum": "".join(rng.choice("0123456789abcdef") for _ in range(64)),
            "config": config,
            "agent_info": {"name": "terminus-2", "version": "2.0.0",
                           "model_info": {"name": SERVED_MODEL, "provider": "hosted_vllm"}},
            "agent_result": None if not agent_ran else {
                "n_input_tokens": 1200 * turns, "n_cache_tokens": 0, "n_output_tokens": 150 * turns,
                "cost_usd": None,
                "rollout_details": [{
                    "prompt_token_ids": [_token_ids(rng, rollout_tokens) for _ in range(turns)],
                    "completion_token_ids": [_token_ids(rng, rollout_tokens) for _ in range(turns)],
                    "logprobs": [[round(-rng.random(), 4) for _ in range(rollout_tokens)] for _ in range(turns)],
                }],
                "metadata": {"n_episodes": turns, "summarization_count": int(continuation_after is not None)},
            },
            "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
            "exception_info": exception_info,
            "started_at": _iso(started),
            "finished_at": _iso(finished),
            "environment_setup": {"started_at": _iso(started), "finished_at": _iso(started + timedelta(seconds=15))},
            "agent_setup": {"started_at": _iso(started + timedelta(seconds=15)),
                            "finished_at": _iso(started + timedelta(seconds=20))},
            "agent_execution": None if not agent_ran else {
                "started_at": _iso(started + timedelta(seconds=20)), "finished_at": _iso(finished)},
            "verifier": None if reward is None else {"started_at": _iso(finished), "finished_at": _iso(finished)},
        }
        files["result.json"] = _dump_json(result, 4)
    return files


def summarize(name: str, *, outcome: str, n_steps: int, task: str | None = None) -> TrialSummary:
    """What `trial_files(name, outcome=..., n_steps=...)` produces, stated independently."""
    turns = 0 if outcome == "setup_error" else (max(1, n_steps // 2) if outcome == "exception" else max(1, n_steps))
    return TrialSummary(
        name=name, task=task or name.rsplit("__", 1)[0], outcome=outcome, n_agent_steps=turns,
        reward=REWARDS.get(outcome),
        exception_type={"exception": "AgentTimeoutError", "setup_error": "AgentSetupTimeoutError"}.get(outcome),
        has_result=outcome != "incomplete", has_trajectory=outcome != "setup_error",
    )


def write_files(trial_dir: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = trial_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def write_trial(root: Path, name: str, *, seed: int, outcome: str = "success", n_steps: int = 4,
                **options) -> TrialSummary:
    """Write one trial folder `root/name` (options as for `trial_files`); return its summary."""
    write_files(Path(root) / name, trial_files(name, seed=seed, outcome=outcome, n_steps=n_steps, **options))
    return summarize(name, outcome=outcome, n_steps=n_steps, task=options.get("task"))


@dataclass(frozen=True)
class PlannedTrial:
    name: str
    task: str
    outcome: str
    n_steps: int


def plan_trials(n_trials: int, *, seed: int, steps: tuple[int, int] = (2, 6),
                outcomes: dict[str, float] | None = None) -> list[PlannedTrial]:
    """n_trials trials with unique names, sorted by name; outcomes drawn with these weights."""
    weights = outcomes or {"success": 0.45, "partial": 0.05, "failure": 0.45, "exception": 0.05}
    rng = random.Random(f"plan:{seed}")
    kinds, probabilities = zip(*weights.items())
    planned: dict[str, PlannedTrial] = {}
    while len(planned) < n_trials:
        task = make_task_name(rng)
        name = make_trial_name(task, rng)
        planned[name] = PlannedTrial(name, task, rng.choices(kinds, probabilities)[0], rng.randint(*steps))
    return [planned[name] for name in sorted(planned)]


def write_trace_tree(root: Path, n_trials: int, *, seed: int, steps: tuple[int, int] = (2, 6),
                     outcomes: dict[str, float] | None = None, **options) -> list[TrialSummary]:
    """Write n_trials trial folders directly under root (the flat SkyRL layout)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    return [write_trial(root, plan.name, seed=seed, outcome=plan.outcome, n_steps=plan.n_steps,
                        task=plan.task, **options)
            for plan in plan_trials(n_trials, seed=seed, steps=steps, outcomes=outcomes)]


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(EPOCH.timestamp())
    info.mode = 0o644
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def add_trial_to_tar(tar: tarfile.TarFile, name: str, files: dict[str, bytes]) -> None:
    for rel in sorted(files):
        _add_member(tar, f"{name}/{rel}", files[rel])


def write_trace_tar(tar_path: Path, n_trials: int, *, seed: int, steps: tuple[int, int] = (2, 6),
                    outcomes: dict[str, float] | None = None, **options) -> list[TrialSummary]:
    """Write the sync step's `trace_jobs.tar` directly (no tree on disk): members
    `<trial>/<path>` relative to the trace root, sorted, regular files only. Memory holds one
    trial at a time."""
    summaries = []
    Path(tar_path).parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for plan in plan_trials(n_trials, seed=seed, steps=steps, outcomes=outcomes):
            files = trial_files(plan.name, seed=seed, outcome=plan.outcome, n_steps=plan.n_steps,
                                task=plan.task, **options)
            add_trial_to_tar(tar, plan.name, files)
            summaries.append(summarize(plan.name, outcome=plan.outcome, n_steps=plan.n_steps, task=plan.task))
    return summaries


def tar_tree(root: Path, tar_path: Path) -> int:
    """Tar an existing trace tree the way the sync step does; returns the member count."""
    root = Path(root)
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            _add_member(tar, path.relative_to(root).as_posix(), path.read_bytes())
    return len(paths)


def write_unsafe_tar(tar_path: Path, kind: str, *, seed: int = 0) -> str:
    """A tar holding one good trial and one unsafe member; returns the unsafe member's name.

    kind: parent (`../` escape), absolute, symlink, hardlink, device, fifo.
    """
    good = trial_files("codecontests-1__AAAAAAA", seed=seed, n_steps=1)
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(good):
            _add_member(tar, f"codecontests-1__AAAAAAA/{rel}", good[rel])
        if kind == "parent":
            name = "codecontests-1__AAAAAAA/../../escaped.txt"
            _add_member(tar, name, b"escaped\n")
        elif kind == "absolute":
            name = "/tmp/rlkeep-absolute-member.txt"
            _add_member(tar, name, b"absolute\n")
        else:
            name = "codecontests-1__AAAAAAA/agent/link"
            info = tarfile.TarInfo(name)
            info.mtime = int(EPOCH.timestamp())
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, "codecontests-1__AAAAAAA/result.json"
            elif kind == "device":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            else:
                raise ValueError(f"unknown unsafe member kind {kind!r}")
            tar.addfile(info)
    return name
