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


def _fresh_client(monkeypatch, tmp_path: Path, signature: str) -> None:
    """The next s3_client() is built anew: presigning with SigV4 where AWS_CONFIG_FILE asks for s3v4,
    else with botocore's default for a custom endpoint, SigV2."""
    from rlkeep.storage import client as client_module, signer as signer_module

    config = tmp_path / "aws-config"
    config.write_text("[default]\n" + ("s3 =\n    signature_version = s3v4\n" if signature == "s3v4" else ""))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setattr(client_module, "_clients", {})
    monkeypatch.setattr(signer_module, "_signers", {})


@pytest.mark.parametrize("signature", ["s3", "s3v4"], ids=["sigv2", "sigv4"])
def test_small_uploads_are_presigned_puts_whose_md5_the_store_checks(
        bucket: str, tmp_path: Path, monkeypatch, signature: str) -> None:
    """Uploads below the multipart size go as PUTs presigned like botocore's own (the signer reproduced
    botocore's presigned PUT), never through put_object; odd keys, an empty and a 1 MiB file arrive as they
    are, with the ETag of their MD5; a body that is not what its signed Content-MD5 says is refused by the
    store and nothing is stored."""
    import base64
    import io

    from rlkeep.storage import s3_client, upload_tree
    from rlkeep.storage.connection import connection_for
    from rlkeep.storage.failures import HttpStatusError
    from rlkeep.storage.signer import query_signer

    _fresh_client(monkeypatch, tmp_path, signature)
    client = s3_client()
    signer = query_signer(client, bucket)
    assert signer is not None and signer.version == (4 if signature == "s3v4" else 2) and "PUT" in signer.methods

    def no_put_object(**kwargs):
        raise AssertionError(f"put_object was called for {kwargs.get('Key')}")

    monkeypatch.setattr(client, "put_object", no_put_object, raising=False)
    contents = {"plain.json": b'{"a": 1}', "with space/a b.txt": os.urandom(77), "ünïcødé/ß.log": os.urandom(5),
                "sym+bols=&;,@$!'()*/x~y.txt": os.urandom(300), "empty.bin": b"", "big.bin": os.urandom(1 << 20)}
    source = tmp_path / "tree"
    for key, data in contents.items():
        (source / key).parent.mkdir(parents=True, exist_ok=True)
        (source / key).write_bytes(data)
    store = open_store(f"s3://{bucket}/put-{signature}")
    assert upload_tree(source, store) == len(contents)
    store.put_bytes("bytes/one.bin", b"put_bytes takes the same path")
    contents["bytes/one.bin"] = b"put_bytes takes the same path"
    assert {key: store.read_bytes(key) for key in contents} == contents
    for key, data in contents.items():
        assert store.head(key).etag == hashlib.md5(data).hexdigest(), key

    hashed, sent = b"the bytes that were hashed", b"the bytes that went instead"
    claimed = base64.b64encode(hashlib.md5(hashed).digest()).decode()
    with pytest.raises(HttpStatusError) as refused:
        connection_for(signer.scheme, signer.host).put(
            signer.target(store.full_key("changed.bin"), "PUT", claimed), io.BytesIO(sent), len(sent), claimed)
    assert (refused.value.status, refused.value.code) == (400, "BadDigest")
    assert not store.exists("changed.bin")


def test_a_store_that_refuses_presigned_puts_gets_put_object_from_then_on(tmp_path: Path, monkeypatch, caplog) -> None:
    """moto 5.2 refuses every presigned URL that names a Content-MD5 (it looks the header up as
    "Content-MD5" where its server spells it "Content-Md5"): the first refusal switches the store to
    put_object, said once, and every object arrives whole."""
    import boto3
    from moto.server import ThreadedMotoServer

    from rlkeep.storage import s3_client, upload_tree
    from rlkeep.storage.signer import query_signer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for name, value in (("AWS_ENDPOINT_URL_S3", f"http://{host}:{port}"), ("AWS_ACCESS_KEY_ID", "moto-key"),
                            ("AWS_SECRET_ACCESS_KEY", "moto-secret"), ("AWS_DEFAULT_REGION", "us-east-1")):
            monkeypatch.setenv(name, value)
        _fresh_client(monkeypatch, tmp_path, "s3")
        boto3.client("s3").create_bucket(Bucket="moto")
        assert "PUT" in query_signer(s3_client(), "moto").methods
        contents = {f"trial-{n}/result.json": os.urandom(100 + n) for n in range(12)}
        source = tmp_path / "tree"
        for key, data in contents.items():
            (source / key).parent.mkdir(parents=True, exist_ok=True)
            (source / key).write_bytes(data)
        store = open_store("s3://moto/run")
        with caplog.at_level("WARNING", logger="rlkeep.storage.s3"):
            assert upload_tree(source, store) == len(contents)
        assert {key: store.read_bytes(key) for key in contents} == contents
        assert "PUT" not in query_signer(s3_client(), "moto").methods
        said = [r.getMessage() for r in caplog.records if "refused a presigned PUT" in r.getMessage()]
        assert said == ["s3://moto/run: the store refused a presigned PUT's signature; uploading with put_object "
                        "from now on"]
    finally:
        server.stop()


def test_an_upload_whose_presigned_put_was_refused_by_another_thread_meanwhile_goes_by_put_object(
        bucket: str, tmp_path: Path, monkeypatch) -> None:
    """Seen in CI on moto: one thread of upload_tree found the store refusing presigned PUTs while
    another had already chosen to presign; that one failed ("PUT requests are not proven ...")."""
    from rlkeep.storage import s3_client
    from rlkeep.storage.signer import query_signer

    _fresh_client(monkeypatch, tmp_path, "s3")
    signer = query_signer(s3_client(), bucket)
    assert "PUT" in signer.methods
    sign = signer.target

    def refused_meanwhile(key: str, method: str = "GET", content_md5: str = "") -> str:
        if method == "PUT":
            signer.refuse_puts()  # what the other thread did between this one's choice and its signing
        return sign(key, method, content_md5)

    monkeypatch.setattr(signer, "target", refused_meanwhile)
    store = open_store(f"s3://{bucket}/meanwhile")
    store.put_bytes("one.json", b'{"sent": "by put_object"}')
    assert store.read_bytes("one.json") == b'{"sent": "by put_object"}'


@pytest.mark.parametrize("kind", ["reset", "slowdown", "error500"])
def test_presigned_puts_are_retried_through_transient_faults(bucket: str, s3_server, tmp_path: Path, monkeypatch,
                                                             kind: str) -> None:
    from rlkeep.storage import upload_tree

    source = tmp_path / "tree"
    contents = {f"trial-{i:03d}/result.json": os.urandom(100 + i) for i in range(30)}
    for key, data in contents.items():
        (source / key).parent.mkdir(parents=True, exist_ok=True)
        (source / key).write_bytes(data)
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        proxy.fail_next(kind, 3, method="PUT", path_contains="/trial-00")
        store = open_store(f"s3://{bucket}/faulty-{kind}")
        assert upload_tree(source, store, workers=4) == len(contents)
        assert proxy.faults_injected() == 3
        assert {key: store.read_bytes(key) for key in contents} == contents


def test_a_presigned_put_that_keeps_failing_names_the_object_and_the_answer(bucket: str, s3_server, tmp_path: Path,
                                                                           monkeypatch) -> None:
    source = tmp_path / "one.json"
    source.write_bytes(b"{}")
    with FaultProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = open_store(f"s3://{bucket}/down")
        proxy.fail_always("error500")
        with pytest.raises(StoreError, match=r"s3://t\d+-\d+/down/one.json: upload failed after 4 attempts: "
                                             r"HTTP 500 InternalError"):
            store.put_file("one.json", source)
        proxy.clear()
        proxy.fail_next("forbidden", 1, method="PUT")
        with pytest.raises(StoreError, match=r"down/one.json: access denied \(HTTP 403 AccessDenied\)"):
            store.put_file("one.json", source)
        assert not store.exists("one.json")
