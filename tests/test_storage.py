"""The store module against a real S3 server (SeaweedFS on 127.0.0.1) and file:// stores."""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlkeep.errors import StoreError
from rlkeep.storage import ObjectInfo, check_key, fetch_in_order, open_store
from tests.support.faultproxy import FaultProxy


def fill(store, count: int, prefix: str = "trace_jobs") -> dict[str, bytes]:
    contents = {f"{prefix}/trial-{i:05d}/result.json": os.urandom(1 + (i * 37) % 700) for i in range(count)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: store.put_bytes(*item), contents.items()))
    return contents


def test_listing_spans_pages_in_key_order(bucket: str) -> None:
    store = open_store(f"s3://{bucket}/iris/job")
    contents = fill(store, 253)
    store.put_bytes("ckpts/latest_ckpt_global_step.txt", b"40")
    listed = list(store.list("trace_jobs", page_size=50))
    assert [info.key for info in listed] == sorted(contents)
    assert {info.key: info.size for info in listed} == {k: len(v) for k, v in contents.items()}
    assert len(list(store.list())) == 254


@pytest.mark.parametrize("presigned", ["1", "0"], ids=["presigned-get", "get-object"])
def test_fetch_in_order_checks_sizes_and_hashes(bucket: str, presigned: str, monkeypatch) -> None:
    monkeypatch.setenv("RLKEEP_S3_PRESIGNED_GET", presigned)
    store = open_store(f"s3://{bucket}/run")
    contents = fill(store, 300)
    infos = list(store.list("trace_jobs"))
    fetched = list(fetch_in_order(store, infos, workers=8, max_inflight_bytes=4096))
    assert [f.info.key for f in fetched] == [i.key for i in infos]
    for item in fetched:
        assert item.read() == contents[item.info.key]
        assert item.sha256 == hashlib.sha256(contents[item.info.key]).hexdigest()


def test_object_vanishing_after_listing_is_reported_not_raised(bucket: str) -> None:
    store = open_store(f"s3://{bucket}/run")
    fill(store, 5)
    infos = list(store.list())
    store.delete([infos[2].key])
    fetched = list(fetch_in_order(store, infos))
    assert [f.body is None for f in fetched] == [False, False, True, False, False]


@pytest.mark.parametrize("presigned", ["1", "0"], ids=["presigned-get", "get-object"])
def test_changed_object_is_an_error(bucket: str, presigned: str, monkeypatch) -> None:
    monkeypatch.setenv("RLKEEP_S3_PRESIGNED_GET", presigned)
    store = open_store(f"s3://{bucket}/run")
    store.put_bytes("a.txt", b"12345")
    infos = list(store.list())
    store.put_bytes("a.txt", b"123456789")
    with pytest.raises(StoreError, match=r"run/a.txt: larger than the 5 bytes listed; the object changed during sync"):
        list(fetch_in_order(store, infos))
    store.put_bytes("a.txt", b"123")
    with pytest.raises(StoreError, match="run/a.txt: listed with 5 bytes but read 3; the object changed during sync"):
        list(fetch_in_order(store, infos))
    store.put_bytes("a.txt", b"x" * 4096)  # larger than listed and larger than the spill size: on disk
    with pytest.raises(StoreError, match="listed with 5 bytes but read 4096"):
        list(fetch_in_order(store, infos, spill_bytes=4))
    store.put_bytes("a.txt", b"54321")  # the same size again: the connections are still usable
    assert [f.read() for f in fetch_in_order(store, infos)] == [b"54321"]


def test_fetch_in_order_keeps_order_across_batches_and_can_stop_early(bucket: str) -> None:
    store = open_store(f"s3://{bucket}/many")
    for i in range(70):
        store.put_bytes(f"k{i:03d}", bytes([i]) * (i * 1000))
    infos = list(store.list())
    fetched = []
    for item in fetch_in_order(store, infos, workers=3, max_inflight_bytes=50_000):
        fetched.append(item)
        if len(fetched) == 40:
            break
    assert [f.info.key for f in fetched] == [f"k{i:03d}" for i in range(40)]
    assert all(f.read() == bytes([i]) * (i * 1000) for i, f in enumerate(fetched))


@pytest.mark.parametrize("kind", ["reset", "slowdown", "error500", "truncate"])
def test_transient_faults_are_retried_to_identical_bytes(bucket: str, s3_server, monkeypatch, kind: str) -> None:
    store = open_store(f"s3://{bucket}/run")
    contents = fill(store, 40)
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        proxy.fail_next(kind, 3, method="GET", path_contains="/trial-0000")
        proxy.fail_next(kind, 1, method="GET", query_contains="list-type=2")
        infos = list(store.list("trace_jobs"))
        fetched = {f.info.key: f.read() for f in fetch_in_order(store, infos, workers=4)}
        assert proxy.faults_injected() == 4
    assert fetched == contents


def test_store_outage_mid_listing_fails_cleanly_then_resumes(bucket: str, s3_server, monkeypatch) -> None:
    store = open_store(f"s3://{bucket}/run")
    contents = fill(store, 120)
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        proxy.fail_always("reset")
        proxy.plans[-1].matches = lambda method, target: "continuation-token" in target
        with pytest.raises(StoreError, match=r"s3://t\d+-\d+/run: listing trace_jobs: failed after 5 attempts"):
            list(store.list("trace_jobs", page_size=50))
        assert proxy.faults_injected() >= 5  # urllib3 may also retry a reset pooled connection once
        proxy.clear()
        assert [i.key for i in store.list("trace_jobs", page_size=50)] == sorted(contents)


@pytest.mark.parametrize("key", ["../etc/passwd", "a/../../b", "/abs", "a//b", "a/./b", ""])
def test_keys_that_could_escape_are_refused(key: str) -> None:
    with pytest.raises(StoreError, match="refusing object key"):
        check_key(key, where="test")


def test_file_store_round_trip(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    store.put_bytes("logs/a.out", b"hello")
    store.put_file("b/c.bin", _write(tmp_path / "src", b"\x00" * 10))
    assert [i.key for i in store.list()] == ["b/c.bin", "logs/a.out"]
    assert store.read_bytes("logs/a.out") == b"hello"
    assert store.delete(["logs/a.out", "missing"]) == ["logs/a.out"]
    assert not store.exists("logs/a.out")


def test_unsupported_urls(tmp_path: Path) -> None:
    for url in ("gs://bucket/x", "file://relative/x", "s3:///nobucket"):
        with pytest.raises(StoreError):
            open_store(url)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_object_reads_are_signed_by_the_proven_signer_for_any_key(bucket: str) -> None:
    """The fast GET path is in use (botocore's probe URL was reproduced) and signs keys that need
    percent-encoding the way the server checks them."""
    from rlkeep.storage import s3_client
    from rlkeep.storage.signer import query_signer

    store = open_store(f"s3://{bucket}/odd keys")
    contents = {key: os.urandom(50 + i) for i, key in enumerate(
        ["plain.json", "with space/a b.txt", "ünïcødé/ß.log", "sym+bols=&;,@$!'()*/x~y.txt", "percent%20literal/%2F.bin"])}
    for key, data in contents.items():
        store.put_bytes(key, data)
    assert query_signer(s3_client(), bucket) is not None
    assert {key: store.read_bytes(key) for key in contents} == contents
    fetched = list(fetch_in_order(store, list(store.list()), workers=2))
    assert {f.info.key: f.read() for f in fetched} == contents
