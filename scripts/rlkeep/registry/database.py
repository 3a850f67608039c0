"""Campaign registry: record a published run's model, its trace dataset and exact base-model lineage.

Runs only when the record says `register.authorized: true` (runbook step 6). The registry is
a database reached by URL: `sqlite:///path` (stdlib sqlite3, the embedded default) or
`postgresql://user:password@host:port/db` (psycopg 3). The schema below is created if it is
missing. Everything a registration writes happens in ONE transaction: any stop leaves the
registry exactly as it was. The step journals its decision inside that transaction
(`<job>/.work/register/decided.json`), so a rerun after a stop that came after the commit reports
what registering the job did ("inserted"), not what the rerun found left to do ("unchanged").

Stops (never guesses): a base model that is not registered under exactly its Hub id, more
than one candidate row for a Hub id (Hub ids are case-insensitive, so case variants are
ambiguous), a row owned by someone else, a model or dataset already linked to another job.
A password in the URL never appears in output or errors.
"""
from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from rlkeep.errors import RlkeepError
from rlkeep.hub.client import REPO_ID_RE

log = logging.getLogger("rlkeep")

WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TRAINING_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")

TABLES: dict[str, dict[str, str]] = {
    # column -> type (ID: the dialect's identity primary key; REF(table): a foreign key)
    "base_models": {"id": "ID", "hub_id": "TEXT NOT NULL UNIQUE", "owner": "TEXT NOT NULL",
                    "registered_at": "TEXT NOT NULL"},
    "datasets": {"id": "ID", "hub_id": "TEXT NOT NULL UNIQUE", "kind": "TEXT NOT NULL", "job": "TEXT",
                 "owner": "TEXT NOT NULL", "registered_at": "TEXT NOT NULL"},
    "models": {"id": "ID", "hub_id": "TEXT NOT NULL UNIQUE", "base_model_id": "REF(base_models) NOT NULL",
               "training_type": "TEXT NOT NULL", "trace_dataset_id": "REF(datasets)", "job": "TEXT NOT NULL",
               "owner": "TEXT NOT NULL", "registered_at": "TEXT NOT NULL"},
}


# --------------------------------------------------------------------------- URLs


@dataclass(frozen=True)
class RegistryUrl:
    dialect: str  # sqlite | postgresql
    target: str  # sqlite: file path; postgresql: the connection URL (with its password)
    safe: str  # for output: never the password
    password: str | None


def parse_registry_url(url: str) -> RegistryUrl:
    if not isinstance(url, str) or not url:
        raise RlkeepError("registry URL is empty; expected sqlite:///path or postgresql://user@host:port/db")
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if not path:
            raise RlkeepError("registry URL sqlite:///: expected a database file path after sqlite:///")
        return RegistryUrl("sqlite", unquote(path), url, None)
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
        password = password or next((v for k, v in query if k == "password"), None)
        netloc = parts.hostname or ""
        if parts.username:
            netloc = f"{parts.username}@{netloc}"
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        safe_query = urlencode([(k, v) for k, v in query if k != "password"])
        safe = urlunsplit((parts.scheme, netloc, parts.path, safe_query, ""))
        return RegistryUrl("postgresql", url, safe, unquote(password) if password else None)
    scheme = url.split(":", 1)[0] if ":" in url else url[:20]
    raise RlkeepError(f"registry URL scheme {scheme!r}: expected sqlite:///path or postgresql://user@host:port/db")


def _scrub(text: str, registry: RegistryUrl) -> str:
    if registry.password:
        text = text.replace(registry.password, "***")
    return text.replace(registry.target, registry.safe) if registry.dialect == "postgresql" else text


# --------------------------------------------------------------------------- connections


class Session:
    """One transaction on either database; SQL is written with `?` placeholders."""

    def __init__(self, connection: Any, dialect: str) -> None:
        self.connection = connection
        self.dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.dialect == "postgresql":
            sql = sql.replace("?", "%s")
        cursor = self.connection.execute(sql, tuple(params))
        return list(cursor.fetchall()) if cursor.description else []

    def insert(self, table: str, values: dict[str, Any]) -> int:
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        if self.dialect == "postgresql":
            return int(self.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id", list(values.values()))[0][0])
        cursor = self.connection.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(values.values()))
        return int(cursor.lastrowid)

    def columns(self, table: str) -> set[str]:
        if self.dialect == "postgresql":
            rows = self.execute("SELECT column_name FROM information_schema.columns "
                                "WHERE table_schema = current_schema() AND table_name = ?", [table])
            return {row[0] for row in rows}
        return {row[1] for row in self.execute(f"PRAGMA table_info({table})")}


def _driver_errors(dialect: str) -> tuple[type[BaseException], ...]:
    if dialect == "postgresql":
        import psycopg

        return (psycopg.Error,)
    return (sqlite3.Error,)


@contextmanager
def transaction(url: str) -> Iterator[Session]:
    """One transaction: committed when the block ends normally, rolled back on any exception."""
    registry = parse_registry_url(url)
    errors = _driver_errors(registry.dialect)
    try:
        if registry.dialect == "sqlite":
            connection = sqlite3.connect(registry.target, isolation_level=None, timeout=30)
        else:
            import psycopg

            connection = psycopg.connect(registry.target, connect_timeout=10)
    except errors as error:
        raise RlkeepError(f"registry {registry.safe}: cannot connect: {_scrub(str(error).strip(), registry)}") from None
    try:
        if registry.dialect == "sqlite":
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("BEGIN IMMEDIATE")
        session = Session(connection, registry.dialect)
        try:
            yield session
        except BaseException:
            connection.rollback()
            raise
        connection.commit()
    except errors as error:
        try:
            connection.rollback()
        except errors:
            pass
        raise RlkeepError(f"registry {registry.safe}: {_scrub(str(error).strip(), registry)}; nothing was written") from None
    finally:
        connection.close()


def ensure_schema(session: Session) -> None:
    for table, columns in TABLES.items():
        definitions = []
        for name, kind in columns.items():
            if kind == "ID":
                kind = ("INTEGER PRIMARY KEY AUTOINCREMENT" if session.dialect == "sqlite"
                        else "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
            elif kind.startswith("REF("):
                target, rest = kind[4:].split(")", 1)
                kind = f"{'INTEGER' if session.dialect == 'sqlite' else 'BIGINT'} REFERENCES {target}(id){rest}"
            definitions.append(f"{name} {kind}")
        session.execute(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(definitions)})")
        missing = sorted(set(columns) - session.columns(table))
        if missing:
            raise RlkeepError(f"registry table {table} has no column(s) {', '.join(missing)}; expected the rlkeep "
                              f"campaign schema ({', '.join(columns)})")


# --------------------------------------------------------------------------- lookups


def _candidates(session: Session, table: str, hub_id: str, columns: str) -> list[tuple[Any, ...]]:
    return session.execute(f"SELECT {columns} FROM {table} WHERE lower(hub_id) = lower(?) ORDER BY id", [hub_id])


def _describe_rows(rows: list[tuple[Any, ...]]) -> str:
    return ", ".join(f"{row[1]!r} (id {row[0]}, owner {row[2]})" for row in rows)


def _one_exact(session: Session, table: str, what: str, hub_id: str, columns: str) -> tuple[Any, ...] | None:
    """The single row with exactly this hub_id, None when there is no candidate at all; stops on ambiguity."""
    rows = _candidates(session, table, hub_id, columns)
    if len(rows) > 1:
        raise RlkeepError(f"{what} {hub_id} is ambiguous in the registry: {len(rows)} rows in {table} match it "
                          f"case-insensitively: {_describe_rows(rows)}; fix the registry so one row names it")
    if rows and rows[0][1] != hub_id:
        raise RlkeepError(f"{what} {hub_id} is not in the registry under exactly that id; {table} has "
                          f"{_describe_rows(rows)}, which differs only in case; refusing to guess: fix the row or the record")
    return rows[0] if rows else None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check(value: Any, pattern: re.Pattern[str], field: str, expected: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise RlkeepError(f"registration: field '{field}' is {value!r}; expected {expected}")
    return value


# --------------------------------------------------------------------------- operations


def register_base_model(url: str, *, hub_id: str, owner: str) -> dict[str, Any]:
    """Add a base model row explicitly (an operator's act; registration never creates one)."""
    _check(hub_id, REPO_ID_RE, "hub_id", "a Hub model id like Qwen/Qwen3-8B")
    _check(owner, WORD, "owner", "an owner name")
    with transaction(url) as session:
        ensure_schema(session)
        row = _one_exact(session, "base_models", "base model", hub_id, "id, hub_id, owner")
        if row is None:
            base_id, action = session.insert("base_models", {"hub_id": hub_id, "owner": owner, "registered_at": _now()}), "inserted"
        elif row[2] != owner:
            raise RlkeepError(f"base model {hub_id} is registered to owner {row[2]}, not {owner}; "
                              "rlkeep only writes records the operator owns")
        else:
            base_id, action = int(row[0]), "unchanged"
    return {"status": "completed", "action": action, "base_model_id": base_id, "hub_id": hub_id,
            "url": parse_registry_url(url).safe}


def _upsert_dataset(session: Session, trace_repo: str, job: str, owner: str) -> tuple[int, str]:
    row = _one_exact(session, "datasets", "trace dataset", trace_repo, "id, hub_id, owner, job, kind")
    if row is None:
        return session.insert("datasets", {"hub_id": trace_repo, "kind": "traces", "job": job, "owner": owner,
                                           "registered_at": _now()}), "inserted"
    if row[2] != owner:
        raise RlkeepError(f"trace dataset {trace_repo} is registered to owner {row[2]}; this run's owner is {owner}; "
                          "rlkeep only writes records the operator owns")
    if row[3] not in (None, job):
        raise RlkeepError(f"trace dataset {trace_repo} is already registered from job {row[3]}; "
                          f"refusing to relink it to job {job}")
    if row[3] is None or row[4] != "traces":
        session.execute("UPDATE datasets SET job = ?, kind = ? WHERE id = ?", [job, "traces", row[0]])
        return int(row[0]), "updated"
    return int(row[0]), "unchanged"


def register_run(
    url: str,
    *,
    model_repo: str,
    trace_repo: str | None,
    base_model: str,
    training_type: str = "rl",
    job: str,
    owner: str,
    before_commit: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Register the published model (and its trace dataset) with its exact base-model lineage.

    One transaction. Idempotent for the same owner and job: a rerun updates the one row
    instead of adding another. Returns the evidence for `<job>/register.json`; `before_commit`
    receives it inside the transaction, before the commit (the step journals it there).
    """
    _check(model_repo, REPO_ID_RE, "model_repo", "a Hub repo id like org/name")
    if trace_repo is not None:
        _check(trace_repo, REPO_ID_RE, "trace_repo", "a Hub dataset id like org/name, or None")
    _check(base_model, REPO_ID_RE, "base_model", "the exact Hub id of the base model, like Qwen/Qwen3-8B")
    _check(training_type, TRAINING_TYPE, "training_type", "an explicit training type such as rl")
    _check(job, WORD, "job", "the job name")
    _check(owner, WORD, "owner", "the operator's owner name")
    safe_url = parse_registry_url(url).safe

    with transaction(url) as session:
        ensure_schema(session)
        base = _one_exact(session, "base_models", "base model", base_model, "id, hub_id, owner")
        if base is None:
            raise RlkeepError(f"base model {base_model} is not in the registry ({safe_url}); register it first with its "
                              "exact Hub id (rlkeep.registry.register_base_model); rlkeep never creates a base-model row "
                              "by guessing")
        base_id = int(base[0])
        dataset_id, dataset_action = _upsert_dataset(session, trace_repo, job, owner) if trace_repo else (None, "none")

        row = _one_exact(session, "models", "model", model_repo,
                         "id, hub_id, owner, job, base_model_id, training_type, trace_dataset_id, registered_at")
        wanted = {"base_model_id": base_id, "training_type": training_type, "trace_dataset_id": dataset_id}
        if row is None:
            registered_at = _now()
            model_id = session.insert("models", {"hub_id": model_repo, **wanted, "job": job, "owner": owner,
                                                 "registered_at": registered_at})
            action = "inserted"
        else:
            model_id, row_owner, row_job, registered_at = int(row[0]), row[2], row[3], row[7]
            if row_owner != owner:
                raise RlkeepError(f"model {model_repo} is registered to owner {row_owner}; this run's owner is {owner}; "
                                  "rlkeep only writes records the operator owns: ask the owner or use another repo")
            if row_job != job:
                raise RlkeepError(f"model {model_repo} is already registered from job {row_job}; refusing to relink "
                                  f"it to job {job}")
            current = {"base_model_id": row[4], "training_type": row[5], "trace_dataset_id": row[6]}
            if current != wanted:
                session.execute("UPDATE models SET base_model_id = ?, training_type = ?, trace_dataset_id = ? WHERE id = ?",
                                [base_id, training_type, dataset_id, model_id])
                action = "updated"
            else:
                action = "unchanged"
        evidence = {
            "status": "completed", "action": action, "url": safe_url,
            "model": model_repo, "model_id": model_id, "base_model": base_model, "base_model_id": base_id,
            "trace_dataset": trace_repo, "trace_dataset_id": dataset_id, "trace_dataset_action": dataset_action,
            "training_type": training_type, "job": job, "owner": owner, "registered_at": registered_at,
        }
        if before_commit is not None:
            before_commit(evidence)
    return evidence


def registered_model(url: str, model_repo: str) -> dict[str, Any] | None:
    """The registry's row for `model_repo` as a registration wrote it (job, owner, base_model,
    trace_dataset, training_type), or None. Reads only: a read-only connection, never the schema
    created or a lock taken for writing (`rlkeep audit`)."""
    registry = parse_registry_url(url)
    errors = _driver_errors(registry.dialect)
    query = ("SELECT m.job, m.owner, b.hub_id, d.hub_id, m.training_type FROM models m "
             "JOIN base_models b ON b.id = m.base_model_id LEFT JOIN datasets d ON d.id = m.trace_dataset_id "
             "WHERE m.hub_id = ?")
    try:
        if registry.dialect == "sqlite":
            if not Path(registry.target).is_file():
                raise RlkeepError(f"registry {registry.safe}: the database file is missing")
            connection = sqlite3.connect(f"{Path(registry.target).resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        else:
            import psycopg

            connection = psycopg.connect(registry.target, connect_timeout=10)
            connection.read_only = True
        try:
            rows = Session(connection, registry.dialect).execute(query, [model_repo])
        finally:
            connection.close()
    except errors as error:
        raise RlkeepError(f"registry {registry.safe}: {_scrub(str(error).strip(), registry)}") from None
    if not rows:
        return None
    job, owner, base_model, trace_dataset, training_type = rows[0]
    return {"job": job, "owner": owner, "base_model": base_model, "trace_dataset": trace_dataset,
            "training_type": training_type}


def cli_main(argv: list[str]) -> int:
    """`rlkeep registry add-base-model URL HUB_ID --owner O`: the operator's explicit base-model row."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="rlkeep registry", description="Campaign registry operations.")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add-base-model", help="register a base model under its exact Hub id")
    add.add_argument("url", help="sqlite:///path or postgresql://user@host:port/db")
    add.add_argument("hub_id", help="exact Hub id, e.g. Qwen/Qwen3-8B")
    add.add_argument("--owner", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(register_base_model(args.url, hub_id=args.hub_id, owner=args.owner), sort_keys=True))
    return 0


# --------------------------------------------------------------------------- pipeline step


def carry_interrupted_actions(interrupted: dict[str, Any] | None, decided: dict[str, Any]) -> dict[str, Any]:
    """The actions to report. When an earlier attempt committed the registration and this attempt finds
    nothing left to do ("unchanged") on the same row, the registration the job made is the earlier
    one, so its actions are reported, as by a run never stopped. When the earlier transaction rolled
    back, this attempt decides the same thing itself."""
    nothing_left = decided["action"] == "unchanged" and decided["trace_dataset_action"] in {"unchanged", "none"}
    if interrupted is None or not nothing_left or interrupted.get("model_id") != decided["model_id"]:
        return decided
    log.info("registration: nothing left to do; reporting this job's earlier registration (%s)", interrupted["action"])
    return {**decided, "action": interrupted["action"], "trace_dataset_action": interrupted["trace_dataset_action"]}
