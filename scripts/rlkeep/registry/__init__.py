"""The campaign registry (the face: the database, its one-transaction registration and its
command are rlkeep.registry.database's, the step rlkeep.registry.step's)."""
from __future__ import annotations

from rlkeep.registry.database import (RegistryUrl, Session, TABLES, TRAINING_TYPE, WORD, carry_interrupted_actions,
                                      cli_main, ensure_schema, parse_registry_url, register_base_model,
                                      register_run, registered_model, transaction)

__all__ = [
    "RegistryUrl", "Session", "TABLES", "TRAINING_TYPE", "WORD", "carry_interrupted_actions", "cli_main",
    "ensure_schema", "parse_registry_url", "register_base_model", "register_run", "registered_model",
    "transaction",
]
