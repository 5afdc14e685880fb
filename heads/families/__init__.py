"""The family table: every drafter family, declared once for the heads layer.

Each row lives beside its code in heads/families/<kind>.py: what the family is (schema, target signals,
trainable or not), how its export is written, read back and checked, which serving engines load that
export (heads/formats/: vLLM, SGLang, transformers), and what its model card says. train/setups/ and
eval/proposers/ hold the other layers' tables; tests/test_families.py walks every family through all
three, so a forgotten entry fails in CI, not in a user's run.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from heads import card
from heads.convert.medusa_original import is_original_medusa
from heads.errors import HeadsError
from heads.families import (
    dflash,
    dflash2,
    draft_lm,
    dspark,
    eagle1,
    eagle3,
    layer_skip,
    lookahead,
    medusa,
    ngram,
    pard,
    peagle,
    retrieval,
    suffix,
)
from heads.families.base import CATEGORIES, CONFIG, SIGNALS, SIZE_KEYS, ExportJob, Family, is_causal_lm
from heads.formats.fingerprint import LOAD_PLOT_FILE, PROFILE_FILE, PROVENANCE_FILES

__all__ = ["CATEGORIES", "FAMILIES", "SIGNALS", "ExportJob", "Family", "Export", "read_export", "get_family"]

FAMILIES: dict[str, Family] = {
    row.kind: row
    for row in (
        draft_lm.FAMILY,
        pard.FAMILY,
        medusa.FAMILY,
        eagle3.FAMILY,
        peagle.FAMILY,
        eagle1.FAMILY,
        ngram.FAMILY,
        suffix.FAMILY,
        retrieval.FAMILY,
        lookahead.FAMILY,
        layer_skip.FAMILY,
        dflash.FAMILY,
        dspark.FAMILY,
        dflash2.FAMILY,
    )
}
DEFAULT_GAMMA = 4  # a report without a γ (a hand-made provenance): the engines' common default
ENGINE_USAGE = """drafthub's engine (lossless; `eval.num_speculative_tokens` and `eval.tree` choose the shape):
`python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""


def get_family(kind: str) -> Family:
    """The family table's row for `kind`; one clear error naming the known kinds otherwise."""
    try:
        return FAMILIES[kind]
    except KeyError:
        raise HeadsError(
            f"drafter.kind={kind!r} has no entry in the family table (heads/families/__init__.py FAMILIES); "
            f"known kinds: {sorted(FAMILIES)}"
        ) from None


@dataclass(frozen=True)
class Export:
    """An exported drafter directory, read once where it enters (python -m eval, the eval stage, the registry's
    re-measure, a benchmark) and handed down: its path, the family that recognises it, its config.json. It stands
    wherever a path does (os.fspath), so the files in it are opened as before."""

    path: Path
    family: Family
    config: dict

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


def read_export(path: str | Path) -> Export:
    """The export at `path`, its family recognised from its config.json (exactly one family must recognise it)."""
    config_file = Path(path) / CONFIG
    if not config_file.is_file():
        raise HeadsError(f"{path} is not an exported drafter (no {CONFIG}); pass the drafter/ directory a run wrote")
    config = json.loads(config_file.read_text())
    if is_original_medusa(config):  # before the causal-LM check: a Medusa-2 full model names its base architecture
        raise HeadsError(
            f"{path} holds Medusa heads in FasterDecoding/Medusa's original layout; convert them first: "
            f"python scripts/convert_medusa.py {path} CONVERTED_DIR --target TARGET"
        )
    if is_causal_lm(config) and not (set(SIZE_KEYS) & set(config) and "vocab_size" in config):
        raise HeadsError(
            f"{config_file} names {config['architectures']} but no model size ({'/'.join(SIZE_KEYS)} and vocab_size); "
            "it would build the architecture's default-size model: save the drafter with save_pretrained"
        )
    matches = [family for family in FAMILIES.values() if family.recognizes(config)]
    if len(matches) != 1:
        found = "no family" if not matches else f"several families ({[f.kind for f in matches]})"
        raise HeadsError(f"{config_file} is recognised by {found}; known kinds: {sorted(FAMILIES)}")
    return Export(Path(path), matches[0], config)


def serving_gamma(provenance: dict) -> int:
    """The one γ users are told for this export: the γ its eval measured and its served check ran (the
    default the export carries where its format has one), within what the family was trained for. The card,
    the registry page and the served check all take it from here; the γ sweep's fastest is reported beside
    it, never silently swapped in."""
    ev = provenance.get("eval") or {}
    gamma = (ev.get("settings") or {}).get("num_speculative_tokens") or (provenance.get("drafter_config") or {}).get(
        "num_speculative_tokens"
    )
    return get_family(provenance["kind"]).serving_gamma(gamma or DEFAULT_GAMMA, provenance)


def usage_text(provenance: dict, target: Optional[str] = None, export_dir: Optional[str] = None) -> str:
    """The card's "Use it" section (markdown): one block per engine that serves the family, then drafthub's
    engine. As the model card prints it (THIS_DIRECTORY, the target's name), or exact for one copy of the
    drafter (`export_dir`, and `target` as loadable where it is served)."""
    family = get_family(provenance["kind"])
    target, gamma = target or provenance["target"]["name_or_path"], serving_gamma(provenance)
    blocks = [family.about(provenance)] + [c.usage(target, gamma, provenance) for c in family.consumers]
    text = "\n\n".join(["## Use it", *filter(None, blocks), ENGINE_USAGE])
    return text if export_dir is None else text.replace("THIS_DIRECTORY", export_dir)


def model_card(provenance: dict) -> str:
    """README.md for an export: the generic card with the family's usage and details sections."""
    family = get_family(provenance["kind"])
    return card.render_model_card(
        provenance,
        library=family.library,
        usage=usage_text(provenance),
        details=family.details(provenance),
        gamma=serving_gamma(provenance),
    )


def write_provenance(
    export_dir: str | Path,
    provenance: dict,
    samples_text: Optional[str] = None,
    card: bool = True,
    load_plot: Optional[bytes] = None,
) -> None:
    """Add drafthub.json, the model card (card=True), the eval samples (given), the acceptance profile (from the
    report) and the card's serving-under-load plot (given) to an export directory, each file atomically.

    No serving engine reads them (heads.formats.fingerprint leaves them out of the served-files
    hash), so adding them keeps the directory the served check ran byte for byte."""
    root = Path(export_dir)
    files: list[tuple[str, str | bytes]] = [(PROVENANCE_FILES[0], json.dumps(provenance, indent=2))]
    if card:
        files.append((PROVENANCE_FILES[1], model_card(provenance)))
    profile = (provenance.get("eval") or {}).get("speculation_profile")
    if profile is not None:
        files.insert(0, (PROFILE_FILE, json.dumps(profile, indent=2)))
    if load_plot is not None:
        files.insert(0, (LOAD_PLOT_FILE, load_plot))
    if samples_text is not None:
        files.insert(0, (PROVENANCE_FILES[2], samples_text))  # first: drafthub.json's report binds it
    for name, text in files:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=root.parent)  # outside: a crash leaves no stray file inside
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the card from other users of a shared registry
        os.replace(tmp, root / name)
