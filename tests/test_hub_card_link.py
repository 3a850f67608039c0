"""link_model_card when the Hub's address moved between invocations (issue 28): the card links the
trace dataset by its repo id at the Hub in use, the check compares repo ids, and a rerun whose commit
would be empty verifies what is there. The same Hub (one state folder) is served on a new port each
time, as `rlkeep demo` does after a Ctrl-C; the step runs against it through the real client."""
from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi

from rlkeep.hub import (
    TRACES_HEADING, TRACES_PENDING, check_publication_main, link_model_card_step, markdown_section, publish_model,
)
from rlkeep.context import StepContext
from rlkeep.jsonio import read_json, write_json
from rlkeep.records import validate_record_data
from tests.support.hub import new_token, running_hub
from tests.test_hub import pending_model_files, write_tree

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # httpx2 on LFS PUT

JOB = "rl-moved"
MODEL, TRACES = "demo/rl-moved", "demo/rl-moved-traces"


def link_context(tmp_path: Path) -> StepContext:
    """A job whose model is uploaded with its link pending and whose trace dataset is verified."""
    record = validate_record_data({
        "job": JOB, "user": "demo", "scheduler": "none", "chain": [f"/demo/{JOB}"], "store": "file:///nowhere",
        "checkpoint": {"interval": 20}, "base_model": "demo/base",
        "publish": {"model": MODEL, "traces": TRACES, "private": True}}, Path(f"records/{JOB}.yaml"))
    job_dir = tmp_path / JOB
    return StepContext(job=JOB, record=record, data_root=tmp_path, inputs={
        "upload": job_dir / "verify" / "model_upload.json", "traces": job_dir / "verify" / "traces.json",
        "stage": write_tree(job_dir / "stage" / "model", pending_model_files())},
        outputs={"verify": job_dir / "verify" / "model.json"})


def card_section(api: HfApi, scratch: Path) -> str:
    path = api.hf_hub_download(MODEL, "README.md", local_dir=scratch)
    section = markdown_section(Path(path).read_text(encoding="utf-8"), TRACES_HEADING)
    assert section is not None
    return section


def test_a_card_linked_at_one_hub_address_is_relinked_and_verified_at_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = link_context(tmp_path)
    token = new_token()
    monkeypatch.setenv("HF_TOKEN", token)
    with running_hub(tmp_path / "hub", token=token) as first:
        monkeypatch.setenv("HF_ENDPOINT", first.url)
        uploaded = publish_model(ctx.inputs["stage"], MODEL, private=True, commit_message="upload")
        write_json(ctx.inputs["upload"], {"status": "completed", "commit": uploaded["commit"]})
        HfApi(endpoint=first.url, token=token).create_repo(TRACES, repo_type="dataset", private=True)
        write_json(ctx.inputs["traces"], {"status": "completed", "repo_id": TRACES, "commit": "c0ffee",
                                          "url": f"{first.url}/datasets/{TRACES}"})
        link_model_card_step(ctx)
        first_url = first.url
    # Interrupted after the card's commit, before verify/model.json: the next invocation finds the
    # card on the Hub and verify/traces.json naming the first address.
    ctx.outputs["verify"].unlink()
    with running_hub(tmp_path / "hub", token=token) as second:
        assert second.url != first_url
        monkeypatch.setenv("HF_ENDPOINT", second.url)
        api = HfApi(endpoint=second.url, token=token)
        before = [c.commit_id for c in api.list_repo_commits(MODEL)]
        link_model_card_step(ctx)
        evidence = read_json(ctx.outputs["verify"])
        assert evidence["status"] == "completed"
        assert evidence["training_traces_link"] == {"dataset": TRACES, "url": f"{second.url}/datasets/{TRACES}",
                                                    "traces_commit": "c0ffee"}
        section = card_section(api, tmp_path / "download-2")
        assert f"[{TRACES}]({second.url}/datasets/{TRACES})" in section and first_url not in section
        after = [c.commit_id for c in api.list_repo_commits(MODEL)]
        assert after[1:] == before and evidence["verified_commit"] == after[0]  # one commit: the card's new link

        # Interrupted again after the same commit: this time the commit would be empty; the rerun
        # makes none and verifies what is there.
        ctx.outputs["verify"].unlink()
        second.clear_requests()
        link_model_card_step(ctx)
        again = read_json(ctx.outputs["verify"])
        assert again["status"] == "completed" and again["published"]["no_op"] is True
        assert [r for r in second.requests() if r["kind"] == "commit"] == []
        assert again["verified_commit"] == after[0] == api.repo_info(MODEL).sha


def test_check_publication_compares_repo_ids_and_says_endpoint_is_no_longer_needed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = pending_model_files()
    files["README.md"] = files["README.md"].replace(
        TRACES_PENDING, f"The traces: [{TRACES}](http://127.0.0.1:1/hub/datasets/{TRACES}).")
    root = write_tree(tmp_path / "m", files)
    assert check_publication_main([str(root), "--dataset", TRACES]) == 0
    assert check_publication_main([str(root), "--dataset", MODEL]) == 1
    assert f"links {TRACES}, not the trace dataset {MODEL}" in capsys.readouterr().out
    assert check_publication_main([str(root), "--dataset", TRACES, "--endpoint", "https://huggingface.co"]) == 0
    assert "--endpoint is no longer needed" in capsys.readouterr().err
