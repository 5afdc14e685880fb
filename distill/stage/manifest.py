"""A dataset's manifest: what it was made from (every setting that changes it, hashed; the prompt files' and the
weights' content digests), its counts, and why another run's settings would distil it again."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from distill.config import DataConfig, TargetConfig
from distill.inputs import hub_commit, source_identity, target_identity
from distill.prompts.chat import tokenizer_hash
from distill.prompts.set_bytes import prompt_set_digests
from distill.stage.examples import TOO_LONG
from distill.stage.shards import load_distilled
from distill.targets import source_identity_of, target_ref
from heads.formats.staging import atomic_write_text
from heads.settings import output_settings

MANIFEST = "manifest.json"

PART = "part.json"  # what one job of a split distillation (data.num_shards > 1) wrote


def input_identities(target: TargetConfig, data: DataConfig) -> dict:
    """The contents behind the names: prompt files and dataset directories, the target's weights (distill/inputs.py).

    A toy world stands for its directory name, which hashes its config and corpus: a rebuilt world (another
    config) is another target, and its alias alone would lend it the old target's answers."""
    sources = [data.prompts, *(m.prompts for m in data.mix)]
    return {
        "prompts": [source_identity(s) for s in sources],
        "target": model_identity(target),
    }


def model_identity(target) -> str | None:
    """What a model (a name or a TargetConfig) stands for, by content: its source's digest (a toy world's directory
    name, which hashes its config and corpus; a GGUF file's bytes), a local directory's weights digest, None for a
    Hub id."""
    return source_identity_of(target) or target_identity(target_ref(target).name)


def config_hash(target: TargetConfig, data: DataConfig) -> str:
    """Hash of every setting and input content that changes the dataset; a stage with this hash done is skipped."""
    # NO_EFFECT keys left out; the prompt rule is versioned, since it decides what the target answers
    settings = {
        "target": asdict(target),
        "data": output_settings(DataConfig, asdict(data)),
        "inputs": input_identities(target, data),
        "prompt_rule": 3,  # 3: the held-out slice (data.holdout) is left out
    }
    payload = json.dumps(settings, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def why_redistil(manifest: dict, target: TargetConfig, data: DataConfig) -> str:
    """What differs between the dataset a manifest describes and what these settings would distil."""
    now = input_identities(target, data)
    before = manifest.get("inputs") or {}
    reasons = []
    if before.get("prompts") not in (None, now["prompts"]):
        reasons.append("the prompt files' contents changed")
    if before.get("target") not in (None, now["target"]):
        reasons.append("the target's weights or config changed")
    return "; ".join(reasons) or "other settings"


def read_manifest(data_dir: str | Path) -> dict | None:
    path = Path(data_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def write_manifest(
    out_dir, target, data, tokenizer, *, digest, num_shards, dropped, heldout, seconds, first_source=None
) -> dict:
    ds = load_distilled(out_dir)
    reasons = ds["finish_reason"]
    manifest = {
        "config_hash": digest,
        "target": {"name_or_path": target.name_or_path, "revision": target.revision},
        "inputs": input_identities(target, data),  # the prompt files' and the weights' content digests
        "prompt_sets": prompt_set_digests(data),  # the named sets' bytes (compared on reuse)
        "target_commit": hub_commit(target.name_or_path, target.revision),  # a Hub target's cached snapshot
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "source": data.source,
        "prompts": {
            "source": data.prompts,
            "split": data.split,
            "max_prompts": data.max_prompts,
            "dropped_too_long": dropped.get(TOO_LONG, 0),
            "dropped": dropped,  # {reason: count}: too long, no user turn, refused by the chat template
            # the held-out slice of data.prompts: positions in file order, never distilled (distill/prompts/heldout.py)
            "heldout": {"count": len(heldout), "seed": data.holdout_seed, "positions": heldout},
            "first_source_samples": first_source,  # the samples of data.prompts, before data.mix's (None: unknown)
        },
        "backend": data.backend,
        "regenerate": data.regenerate,
        "sampling": asdict(data.sampling),
        "counts": {
            "samples": len(ds),
            "tokens": sum(map(len, ds["input_ids"])),
            "assistant_tokens": int(sum(sum(m) for m in ds["loss_mask"])),
            "finish_reasons": {r: reasons.count(r) for r in sorted(set(reasons))},
        },
        "num_shards": num_shards,
        "seconds": round(seconds, 1),
    }
    atomic_write_text(Path(out_dir) / MANIFEST, json.dumps(manifest, indent=2))
    return manifest
