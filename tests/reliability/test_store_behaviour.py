"""The object store behaving as real ones do beyond 5xx, through the fault proxy in front of the real
S3 server: list-after-write lag while the archive upload is verified, SlowDown bursts with
Retry-After, a multipart upload killed between parts, and a store whose clock is hours off ours.

Each test names the guard whose removal makes it fail.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlkeep.archive import upload_archive, verify_uploaded_archive
from rlkeep.errors import RlkeepError, StoreError
from rlkeep.hashing import sha256_file
from rlkeep.storage import S3Store, open_store, s3_client
from tests.reliability import figures_log
from tests.reliability.support import JOB, wait_for
from tests.support.faultproxy import FaultProxy

REPO = Path(__file__).resolve().parents[2]
PART = 5 << 20  # the smallest part S3 takes; the tests lower rlkeep.storage.multipart.MULTIPART_BYTES to it


def archive_files(root: Path, tgz_bytes: int = 64 << 10) -> tuple[Path, Path]:
    """A stand-in archive and MANIFEST: the upload and its verification only read them as files."""
    folder = root / JOB / "archive"
    folder.mkdir(parents=True)
    tgz, manifest = folder / f"{JOB}_archive.tgz", folder / "MANIFEST"
    tgz.write_bytes(os.urandom(tgz_bytes))
    manifest.write_text(f"run={JOB} kind=rl\nkept\t{tgz_bytes}\tlogs/x\n")
    return tgz, manifest


def through(proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)


def assert_verified(result: dict, tgz: Path, manifest: Path) -> None:
    assert result["status"] == "completed"
    assert {o["key"]: o["sha256"] for o in result["objects"]} == {tgz.name: sha256_file(tgz),
                                                                  manifest.name: sha256_file(manifest)}


# --------------------------------------------------------------------------- list-after-write lag


@pytest.mark.parametrize("lag", ["lag_list", "lag_get"])
def test_archive_verification_waits_out_list_after_write_lag(tmp_path: Path, bucket: str, s3_server, monkeypatch,
                                                            lag: str) -> None:
    """Guard: the bounded re-check loop in rlkeep.archive.verified_remote_copy. Without it the first
    check (object not listed yet / HEAD 404) fails the verification of a good upload."""
    tgz, manifest = archive_files(tmp_path)
    dest = f"s3://{bucket}/archives"
    with FaultProxy(s3_server.endpoint, **{lag: 3}) as proxy:
        through(proxy, monkeypatch)
        result = upload_archive(tgz, manifest, dest, JOB)
    hidden = {path for _, path in proxy.lag_served}
    assert hidden == {f"/{bucket}/archives/{JOB}/{tgz.name}", f"/{bucket}/archives/{JOB}/{manifest.name}"}, \
        proxy.lag_served
    assert len(proxy.lag_served) == 6  # the lag was real: 3 answers per object did not show it
    assert_verified(result, tgz, manifest)
    figures_log.record("store_behaviour", case=f"list-after-write {lag}", injected={lag: len(proxy.lag_served)},
                       lost=0)


def test_a_lag_that_never_ends_fails_verification_within_the_bound(tmp_path: Path, bucket: str, s3_server,
                                                                   monkeypatch) -> None:
    """Never passes falsely: an object the listing never shows (or that never reads back) is not verified,
    and the wait is bounded (RLKEEP_STORE_CONSISTENCY_WAIT)."""
    monkeypatch.setenv("RLKEEP_STORE_CONSISTENCY_WAIT", "2")
    tgz, manifest = archive_files(tmp_path)
    dest = f"s3://{bucket}/archives"
    for lag, problem in (("lag_list", "not in the listing of its folder"),
                         ("lag_get", "listed, but a HEAD answers no such object")):
        with FaultProxy(s3_server.endpoint, **{lag: 10**6}) as proxy:
            through(proxy, monkeypatch)
            started = time.monotonic()
            with pytest.raises(RlkeepError) as raised:
                upload_archive(tgz, manifest, dest, JOB)
            took = time.monotonic() - started
        message = str(raised.value)
        assert f"{dest}/{JOB}/{tgz.name}: {problem}" in message, message
        assert "RLKEEP_STORE_CONSISTENCY_WAIT" in message and "not verified" in message
        assert took < 15, took
    # the same copy verifies once the store shows it
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    assert_verified(verify_uploaded_archive(tgz, manifest, dest, JOB), tgz, manifest)


# --------------------------------------------------------------------------- SlowDown with Retry-After


def gaps_after_slowdowns(proxy: FaultProxy) -> list[float]:
    """For each SlowDown answer, the time until the same request (method, path) came again."""
    gaps = []
    timeline = sorted(proxy.timeline)
    for index, (when, method, target, outcome) in enumerate(timeline):
        if outcome != "slowdown":
            continue
        path = target.partition("?")[0]
        later = next((t for t, m, p, _ in timeline[index + 1:] if m == method and p.partition("?")[0] == path), None)
        if later is not None:
            gaps.append(later - when)
    return gaps


def test_slowdown_bursts_are_waited_out_as_the_store_asks(tmp_path: Path, bucket: str, s3_server, monkeypatch) -> None:
    """Guard: rlkeep.storage.failures.slowdown_retry (first needs-retry handler of the boto3 client) and the
    SlowDown branch of S3Store.read_into. Without them botocore gives up after its 5 attempts (a burst
    of 7 fails the upload) and neither path waits the second Retry-After asks."""
    monkeypatch.setenv("RLKEEP_STORE_SLOWDOWN_WAIT", "60")
    tgz, manifest = archive_files(tmp_path)
    dest = f"s3://{bucket}/archives"
    with FaultProxy(s3_server.endpoint, retry_after="1") as proxy:
        through(proxy, monkeypatch)
        proxy.fail_next("slowdown", 7, method="PUT", path_contains=tgz.name)  # past botocore's 5 attempts
        proxy.fail_next("slowdown", 6, method="GET", query_contains="list-type")
        proxy.fail_next("slowdown", 5, method="GET", query_contains="Signature")  # presigned object reads
        result = upload_archive(tgz, manifest, dest, JOB)
        injected = sum(1 for *_, outcome in proxy.timeline if outcome == "slowdown")
        gaps = gaps_after_slowdowns(proxy)
    assert injected == 18
    assert_verified(result, tgz, manifest)
    assert len(gaps) == 18 and min(gaps) >= 0.95, gaps  # every Retry-After was honoured
    figures_log.record("store_faults", rate="SlowDown bursts", requests=len(proxy.log), injected={"slowdown": injected},
                       lost=0)


def test_slowdown_past_the_bound_stops_with_a_clear_message(tmp_path: Path, bucket: str, s3_server,
                                                           monkeypatch) -> None:
    """Guard: the bound in rlkeep.storage.failures.throttle_pause (RLKEEP_STORE_SLOWDOWN_WAIT). Without it the
    upload waits for as long as the store keeps answering SlowDown."""
    monkeypatch.setenv("RLKEEP_STORE_SLOWDOWN_WAIT", "3")
    tgz, manifest = archive_files(tmp_path)
    dest = f"s3://{bucket}/archives"
    with FaultProxy(s3_server.endpoint, retry_after="2") as proxy:
        through(proxy, monkeypatch)
        proxy.fail_next("slowdown", 10**9, method="PUT")
        started = time.monotonic()
        with pytest.raises(StoreError) as raised:
            upload_archive(tgz, manifest, dest, JOB)
        took = time.monotonic() - started
        injected = sum(1 for *_, outcome in proxy.timeline if outcome == "slowdown")
    figures_log.record("store_faults", rate="SlowDown past the bound", requests=injected,
                       injected={"slowdown": injected}, lost=0)
    message = str(raised.value)
    assert injected == 2  # one answer waited out, the next would pass the bound
    assert f"{dest}/{JOB}/{tgz.name}: upload" in message, message
    assert "asks to wait 2 s more" in message and "past the 3 s allowed (RLKEEP_STORE_SLOWDOWN_WAIT)" in message, message
    assert 1.9 <= took < 8, took  # one wait of 2 s was honoured, the next would pass the bound
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    assert list(open_store(dest).list()) == []  # nothing half-written at the destination
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in message and "Signature=" not in message


# --------------------------------------------------------------------------- multipart upload killed between parts


def bucket_uploads(bucket: str) -> list[tuple[str, str]]:
    """(key, upload id) of every multipart upload in progress in the bucket, asked of the real server."""
    page = s3_client().list_multipart_uploads(Bucket=bucket)
    return sorted((u["Key"], u["UploadId"]) for u in page.get("Uploads", []))


def test_a_multipart_upload_killed_between_parts_leaves_no_orphaned_parts(tmp_path: Path, bucket: str, s3_server,
                                                                          monkeypatch) -> None:
    """Guard: S3Store.abort_unfinished_uploads, called by put_file before and after a multipart upload.
    Without it the killed upload's parts stay in the store (invisible, stored and billed) after the rerun."""
    tgz, manifest = archive_files(tmp_path, tgz_bytes=3 * PART - 1)  # three parts
    dest = f"s3://{bucket}/archives"
    key = f"archives/{JOB}/{tgz.name}"
    client = s3_client()
    # Someone else's uploads in progress: another run's key, and a key that only starts like ours.
    others = {client.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"]: k
              for k in (f"archives/other-run/other-run_archive.tgz", f"{key}.bak")}
    script = ("import sys; from pathlib import Path; import rlkeep.storage.multipart as multipart; "
              f"multipart.MULTIPART_BYTES = {PART}; from rlkeep.archive import upload_archive; "
              "upload_archive(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4])")
    with FaultProxy(s3_server.endpoint, stall_seconds=120) as proxy:
        proxy.fail_next("stall", 1, method="PUT", query_contains="partNumber=2")
        env = {**os.environ, "AWS_ENDPOINT_URL_S3": proxy.endpoint, "PYTHONPATH": str(REPO / "scripts")}
        upload = subprocess.Popen([sys.executable, "-c", script, str(tgz), str(manifest), dest, JOB], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def parts_in() -> int:
                ours = [u for k, u in bucket_uploads(bucket) if k == key]
                return len(client.list_parts(Bucket=bucket, Key=key, UploadId=ours[0]).get("Parts", [])) if ours else 0
            assert wait_for(lambda: parts_in() >= 2 or upload.poll() is not None, timeout=60)
            assert upload.poll() is None, upload.stdout.read()  # type: ignore[union-attr]
        finally:
            os.killpg(upload.pid, signal.SIGKILL)
            upload.wait(timeout=30)
    orphaned = [u for k, u in bucket_uploads(bucket) if k == key]
    assert len(orphaned) == 1  # the kill left an upload with parts 1 and 3 and no object
    assert f"{JOB}/{tgz.name}" not in {info.key for info in open_store(dest).list()}  # and no archive object

    monkeypatch.setattr("rlkeep.storage.multipart.MULTIPART_BYTES", PART)
    result = upload_archive(tgz, manifest, dest, JOB)  # the rerun
    assert_verified(result, tgz, manifest)
    left = bucket_uploads(bucket)
    assert [k for k, _ in left if k == key] == []  # no orphaned parts of ours
    assert sorted(left) == sorted((k, u) for u, k in others.items())  # nobody else's upload was touched
    for upload_id, other_key in others.items():
        client.abort_multipart_upload(Bucket=bucket, Key=other_key, UploadId=upload_id)
    figures_log.record("store_behaviour", case="multipart killed between parts", injected={"kill": 1},
                       orphaned_after_rerun=0, lost=0)


# --------------------------------------------------------------------------- clock skew


@pytest.mark.parametrize(("offset", "words"), [(3 * 3600, "3 h 0 min behind"), (-2 * 3600 - 30 * 60, "2 h 30 min ahead of")])
def test_a_store_clock_hours_off_is_reported_as_a_clock_problem(tmp_path: Path, bucket: str, s3_server, monkeypatch,
                                                                offset: int, words: str) -> None:
    """Guard: rlkeep.storage.failures.clock_problem, applied in S3Store.call (API calls) and S3Store._attempts
    (presigned reads and writes). Without it the message is the store's "RequestTimeTooSkewed" (or "Request
    has expired") with no word of the clock or the offset."""
    store_url = f"s3://{bucket}/iris"
    store = open_store(store_url)
    assert isinstance(store, S3Store)
    store.put_bytes("rl-demo/a.log", b"x" * 10)
    with FaultProxy(s3_server.endpoint, clock_offset=offset) as proxy:
        through(proxy, monkeypatch)
        failures = []
        with monkeypatch.context() as api_only:  # a write through the API, as when presigned PUTs are off
            api_only.setenv("RLKEEP_S3_PRESIGNED_PUT", "0")
            for action in (lambda: list(store.list()), lambda: store.put_bytes("rl-demo/b.log", b"y")):
                with pytest.raises(StoreError) as raised:
                    action()
                failures.append(str(raised.value))
        # A presigned request carries its expiry, not its signing time: a store ahead of us finds it expired,
        # one behind us takes it (as S3 does), reads and writes alike.
        if offset > 0:
            for action in (lambda: store.read_bytes("rl-demo/a.log"), lambda: store.put_bytes("rl-demo/c.log", b"z")):
                with pytest.raises(StoreError) as raised:
                    action()
                failures.append(str(raised.value))
                assert "(AccessDenied)" in failures[-1]
        else:
            assert store.read_bytes("rl-demo/a.log") == b"x" * 10
            store.put_bytes("rl-demo/c.log", b"z")
        refused = sum(1 for *_, outcome in proxy.timeline if outcome == "skewed")
    assert refused == len(failures)
    for message in failures:
        assert message.startswith(store_url), message
        assert f"this machine's clock differs from the store's: it is {words} the store's" in message, message
        assert "NTP" in message and "15 minutes" in message
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in message and "Signature=" not in message
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    # nothing was written while refused
    assert [i.key for i in store.list()] == ["rl-demo/a.log"] + ([] if offset > 0 else ["rl-demo/c.log"])
    figures_log.record("store_behaviour", case=f"clock skew {offset:+d} s", injected={"skewed": refused}, lost=0)
