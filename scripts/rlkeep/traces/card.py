"""The trace dataset's card (README.md in the staged dataset): where the rows come from (run, job,
trial count, coverage), which episodes and filters, what was done to the text (credentials
redacted and how many, whether terminal noise was cleaned), and the model repo when the record
names one. Deterministic: built from the export manifest and the record only, no timestamps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkeep.hub.client import resolve_target

CARD_NAME = "README.md"
CARD_MARKER = "<!-- rlkeep: trace dataset card -->"


@dataclass(frozen=True)
class CardInfo:
    """What the dataset card says about where the rows come from (all from the record or the CLI)."""

    job: str | None = None
    dataset_repo: str | None = None
    model_repo: str | None = None
    endpoint: str | None = None  # the Hub the model was published to; None: HF_ENDPOINT or the default


def _percent(value: float) -> str:
    return f"{value * 100:.2f}%"


def render_card(manifest: dict[str, Any], info: CardInfo, *, data_dir: str = "data",
                manifest_name: str = "trace_export_manifest.json") -> str:
    """The dataset card (README.md): deterministic, built from the manifest and the record only."""
    title = f"Agent traces of the RL run `{info.job}`" if info.job else "Agent traces"
    redactions = manifest["redactions"]
    redacted = sum(redactions.values())
    kinds = ", ".join(f"{kind}: {count}" for kind, count in redactions.items()) or "none found"
    changes = manifest["text_changes"]
    cleaning = ("terminal noise was cleaned (ANSI/OSC escapes, bracketed-paste markers, carriage-return "
                "overwrites and other control characters removed), so the text is not exactly what the model saw"
                if changes["terminal_noise_cleaned"] else
                "terminal noise was not cleaned: the text is what the model saw")
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {data_dir}/train-*",
        "tags:",
        "- agent-traces",
        "- harbor",
        "---",
        CARD_MARKER,
        f"# {title}",
        "",
        "Rows in the layout of Harbor's `traces export` (one row per episode: the conversation up to "
        "and including that agent turn), rebuilt by rlkeep from the full durable trace tree of the run.",
        "",
        "## Source",
        "",
    ]
    if info.job:
        lines.append(f"- Run (job): `{info.job}`")
    if info.model_repo:
        lines.append(f"- Policy model: [{info.model_repo}]({resolve_target(info.endpoint).repo_url(info.model_repo)})")
    source = manifest.get("source") or {}
    if source.get("sha256"):
        lines.append(f"- Trace archive: `{source.get('name') or 'trace tree'}` (sha256 `{source['sha256']}`)")
    lines += [
        f"- Trials with a result.json: {manifest['result_count']}",
        f"- Trials exported: {manifest['trials_exported']}; left out by the filter: {manifest['trials_filtered_out']}",
        f"- Result coverage: {_percent(manifest['result_coverage'])} (gate: {_percent(manifest['min_coverage'])})",
        f"- Rows: {manifest['row_count']} in {len(manifest['shards'])} shard(s)",
        "",
        "## Selection",
        "",
        f"- Episodes: `{manifest['episodes']}`"
        + (" (one row per trial and trace source: its final episode, the whole last context)"
           if manifest["episodes"] == "last" else " (one row per agent turn)"),
        f"- Filter: `{manifest['filter']}` ({manifest['filter_rule']})",
        f"- Columns: {', '.join(f'`{name}`' for name in manifest['columns'])}",
        "",
        "## Text",
        "",
        f"- Credentials were redacted before anything was written: {redacted} redaction(s) ({kinds}).",
        f"- {cleaning[0].upper()}{cleaning[1:]}.",
        "- Lone UTF-16 surrogates (not representable in parquet text) were replaced with U+FFFD.",
    ]
    malformed = manifest["malformed"]
    if malformed:
        lines += ["", "## Trials without rows", "",
                  *(f"- `{reason}`: {count}" for reason, count in malformed.items())]
    lines += ["", f"Details: `{manifest_name}`.", ""]
    return "\n".join(lines)
