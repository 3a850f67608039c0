"""Registry: exact lineage, ownership, ambiguity stops, idempotence, one transaction; SQLite and real PostgreSQL."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rlkeep.errors import RlkeepError
from rlkeep.registry import carry_interrupted_actions, parse_registry_url, register_base_model, register_run
from tests.support.postgres import PostgresServer, postgres_server  # noqa: F401 - the session fixture

BASE = "Qwen/Qwen3-8B"
RUN = {"model_repo": "laion/rl-qwen3-swe-v3", "trace_repo": "laion/rl-qwen3-swe-v3-traces", "base_model": BASE,
       "training_type": "rl", "job": "rl-qwen3-swe-v3", "owner": "benjaminfeuer"}


class Db:
    """Raw access to the registry database, to set up foreign rows and observe what was written."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = parse_registry_url(url).dialect

    def rows(self, sql: str) -> list[tuple]:
        if self.dialect == "sqlite":
            with sqlite3.connect(parse_registry_url(self.url).target) as connection:
                return connection.execute(sql).fetchall()
        import psycopg

        with psycopg.connect(self.url) as connection:
            return connection.execute(sql).fetchall()

    def run(self, sql: str) -> None:
        if self.dialect == "sqlite":
            connection = sqlite3.connect(parse_registry_url(self.url).target)
            connection.execute(sql)
            connection.commit()
            connection.close()
            return
        import psycopg

        with psycopg.connect(self.url) as connection:
            connection.execute(sql)

    def count(self, table: str) -> int:
        return int(self.rows(f"SELECT count(*) FROM {table}")[0][0])


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/registry.db"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.url(server.create_database())


@pytest.fixture
def db(registry_url: str) -> Db:
    register_base_model(registry_url, hub_id=BASE, owner="campaign")
    return Db(registry_url)


def test_registers_exact_lineage_once_and_reruns_idempotently(db: Db) -> None:
    first = register_run(db.url, **RUN)
    assert first["status"] == "completed" and first["action"] == "inserted"
    base_id = db.rows(f"SELECT id FROM base_models WHERE hub_id = '{BASE}'")[0][0]
    assert first["base_model_id"] == base_id
    assert db.rows("SELECT hub_id, base_model_id, training_type, job, owner FROM models") == [
        (RUN["model_repo"], base_id, "rl", RUN["job"], RUN["owner"])]
    dataset = db.rows("SELECT id, hub_id, kind, job, owner FROM datasets")
    assert dataset == [(first["trace_dataset_id"], RUN["trace_repo"], "traces", RUN["job"], RUN["owner"])]
    assert db.rows("SELECT trace_dataset_id FROM models")[0][0] == first["trace_dataset_id"]

    again = register_run(db.url, **RUN)
    assert again["action"] == "unchanged" and again["model_id"] == first["model_id"]
    assert again["registered_at"] == first["registered_at"]
    assert (db.count("models"), db.count("datasets"), db.count("base_models")) == (1, 1, 1)

    updated = register_run(db.url, **{**RUN, "trace_repo": None})
    assert updated["action"] == "updated" and updated["model_id"] == first["model_id"]
    assert db.rows("SELECT trace_dataset_id FROM models") == [(None,)]
    assert db.count("models") == 1


class Stopped(Exception):
    """The step stopped (a kill) at the point the test chooses."""


def test_a_registration_stopped_after_its_commit_reports_what_it_did_on_resume(db: Db) -> None:
    """The register step journals its decision inside the transaction; stopped after the commit and
    before register.json, the resumed step finds nothing to do, and reports the interrupted decision."""
    journal: list[dict] = []
    register_run(db.url, **RUN, before_commit=journal.append)  # committed; then the step is killed
    resumed = register_run(db.url, **RUN)
    assert resumed["action"] == "unchanged" and db.count("models") == 1
    reported = carry_interrupted_actions(journal[-1], resumed)
    assert (reported["action"], reported["trace_dataset_action"]) == ("inserted", "inserted")
    assert reported["registered_at"] == journal[-1]["registered_at"]
    # no journal (a registration that finished before): the rerun's own "unchanged" stands
    assert carry_interrupted_actions(None, resumed)["action"] == "unchanged"


def test_a_registration_stopped_before_its_commit_is_decided_again(db: Db) -> None:
    journal: list[dict] = []

    def stop(evidence: dict) -> None:
        journal.append(evidence)
        raise Stopped  # inside the transaction: it rolls back

    with pytest.raises(Stopped):
        register_run(db.url, **RUN, before_commit=stop)
    assert (db.count("models"), db.count("datasets")) == (0, 0)
    resumed = register_run(db.url, **RUN)
    assert carry_interrupted_actions(journal[-1], resumed) == resumed and resumed["action"] == "inserted"


def test_an_interrupted_decision_is_carried_only_when_nothing_was_left_to_do_on_the_same_row(db: Db) -> None:
    journal: list[dict] = []
    register_run(db.url, **RUN, before_commit=journal.append)
    resumed = register_run(db.url, **RUN)
    other_row = {**journal[-1], "model_id": journal[-1]["model_id"] + 1}
    assert carry_interrupted_actions(other_row, resumed) == resumed
    changed = register_run(db.url, **{**RUN, "trace_repo": None})  # this attempt updated the row itself
    assert carry_interrupted_actions(journal[-1], changed) == changed and changed["action"] == "updated"


def test_missing_base_model_stops_and_is_never_created(registry_url: str) -> None:
    with pytest.raises(RlkeepError, match=r"base model Qwen/Qwen3-8B is not in the registry .*register it first"):
        register_run(registry_url, **RUN)
    register_base_model(registry_url, hub_id="Qwen/Qwen3-4B", owner="campaign")
    with pytest.raises(RlkeepError, match="base model Qwen/Qwen3-8B is not in the registry"):
        register_run(registry_url, **RUN)
    db = Db(registry_url)
    assert db.rows("SELECT hub_id FROM base_models") == [("Qwen/Qwen3-4B",)]
    assert (db.count("models"), db.count("datasets")) == (0, 0)


def test_case_variant_base_models_are_ambiguous(db: Db) -> None:
    db.run("INSERT INTO base_models (hub_id, owner, registered_at) VALUES ('qwen/qwen3-8b', 'someone', '2026-01-01')")
    with pytest.raises(RlkeepError, match=r"base model Qwen/Qwen3-8B is ambiguous in the registry: 2 rows .*'qwen/qwen3-8b'"):
        register_run(db.url, **RUN)
    assert db.count("models") == 0 and db.count("datasets") == 0


def test_a_single_case_variant_is_not_taken_for_the_base_model(registry_url: str) -> None:
    register_base_model(registry_url, hub_id="qwen/qwen3-8b", owner="campaign")
    with pytest.raises(RlkeepError, match=r"base model Qwen/Qwen3-8B is not in the registry under exactly that id.*differs only in case"):
        register_run(registry_url, **RUN)
    assert Db(registry_url).count("models") == 0


def test_another_owners_model_stops_and_nothing_is_half_written(db: Db) -> None:
    base_id = db.rows("SELECT id FROM base_models")[0][0]
    db.run("INSERT INTO models (hub_id, base_model_id, training_type, job, owner, registered_at) "
           f"VALUES ('{RUN['model_repo']}', {base_id}, 'sft', 'older-job', 'alice', '2026-01-01T00:00:00Z')")
    with pytest.raises(RlkeepError, match="model laion/rl-qwen3-swe-v3 is registered to owner alice; this run's owner is benjaminfeuer"):
        register_run(db.url, **RUN)
    # The dataset row was inserted before the ownership stop, inside the same transaction: rolled back.
    assert db.count("datasets") == 0
    assert db.rows("SELECT training_type, owner FROM models") == [("sft", "alice")]


def test_another_owners_dataset_or_another_jobs_model_stops(db: Db) -> None:
    db.run("INSERT INTO datasets (hub_id, kind, job, owner, registered_at) "
           f"VALUES ('{RUN['trace_repo']}', 'traces', 'x', 'alice', '2026-01-01T00:00:00Z')")
    with pytest.raises(RlkeepError, match="trace dataset laion/rl-qwen3-swe-v3-traces is registered to owner alice"):
        register_run(db.url, **RUN)
    assert db.count("models") == 0
    register_run(db.url, **{**RUN, "trace_repo": None})
    with pytest.raises(RlkeepError, match="already registered from job rl-qwen3-swe-v3; refusing to relink it to job other-run"):
        register_run(db.url, **{**RUN, "trace_repo": None, "job": "other-run"})
    assert db.rows("SELECT job FROM models") == [(RUN["job"],)]


def test_case_variant_model_rows_are_ambiguous(db: Db) -> None:
    base_id = db.rows("SELECT id FROM base_models")[0][0]
    db.run("INSERT INTO models (hub_id, base_model_id, training_type, job, owner, registered_at) "
           f"VALUES ('LAION/rl-qwen3-swe-v3', {base_id}, 'rl', '{RUN['job']}', '{RUN['owner']}', '2026-01-01T00:00:00Z')")
    with pytest.raises(RlkeepError, match="model laion/rl-qwen3-swe-v3 is not in the registry under exactly that id"):
        register_run(db.url, **RUN)
    assert db.count("models") == 1 and db.count("datasets") == 0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("base_model", "Qwen3-8B", "field 'base_model' is 'Qwen3-8B'; expected the exact Hub id"),
    ("model_repo", "", "field 'model_repo' is ''"),
    ("training_type", "", "field 'training_type' is ''; expected an explicit training type"),
    ("owner", "two words", "field 'owner' is 'two words'"),
])
def test_bad_arguments_name_the_field(tmp_path: Path, field: str, value: str, message: str) -> None:
    with pytest.raises(RlkeepError, match=message):
        register_run(f"sqlite:///{tmp_path}/r.db", **{**RUN, field: value})
    assert not (tmp_path / "r.db").exists()


def test_foreign_schema_is_reported_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "campaign.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE models (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(RlkeepError, match=r"registry table models has no column\(s\) base_model_id, hub_id"):
        register_base_model(f"sqlite:///{path}", hub_id=BASE, owner="campaign")
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "base_models" not in tables  # the schema creation was rolled back with everything else


def test_passwords_never_leave_the_url(postgres_server: PostgresServer) -> None:  # noqa: F811
    database = postgres_server.create_database()
    url = postgres_server.url(database, password="s3cr3t-pw-value")
    register_base_model(url, hub_id=BASE, owner="campaign")
    evidence = register_run(url, **RUN)
    assert "s3cr3t-pw-value" not in repr(evidence)
    assert evidence["url"] == f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{database}"
    closed = f"postgresql://postgres:s3cr3t-pw-value@127.0.0.1:9/{database}?password=s3cr3t-pw-value"
    with pytest.raises(RlkeepError) as error:
        register_run(closed, **RUN)
    assert "cannot connect" in str(error.value) and "s3cr3t-pw-value" not in str(error.value)
    with pytest.raises(RlkeepError, match="registry URL scheme 'mysql'"):
        register_run("mysql://u:p@h/db", **RUN)


def test_cli_adds_a_base_model_explicitly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlkeep.registry import cli_main

    url = f"sqlite:///{tmp_path}/r.db"
    assert cli_main(["add-base-model", url, BASE, "--owner", "campaign"]) == 0
    assert '"action": "inserted"' in capsys.readouterr().out
    assert register_run(url, **RUN)["base_model_id"] == Db(url).rows("SELECT id FROM base_models")[0][0]
