"""drafthub's distilled samples in the layout `speculators train` reads offline (speculators 0.9.0, no vLLM).

    <out>/                        an HF dataset (save_to_disk, torch format): input_ids, loss_mask, seq_len
    <out>/hidden_states/hs_<i>.safetensors   row i: token_ids (T,) int64, hidden_states (T, K+1, H)
    <out>/d2t-<D>.npy, t2d-<D>.npy           the draft vocabulary's maps (speculators' and vLLM's convention)

hidden_states holds the K layers the drafter reads (heads/target_features.py ids: id k < N is the stream entering
layer k), then the last layer's output before the final norm: speculators applies the target's norm and lm_head to it
for its soft targets, as vLLM captures it. speculators reads row i's features from hs_<i> and drops a row whose
token_ids differ from its input_ids, so both come from the same list.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from distill.features.capture import layer_features, lm_head_input
from heads.vocab import DraftVocab

MANIFEST = "drafthub_peer.json"


def write_speculators_data(
    target, rows: list[dict], out: str | Path, layer_ids: list[int], vocab: DraftVocab, *, dtype=torch.bfloat16
) -> dict:
    """Write `rows` ({"input_ids", "loss_mask"} each, as drafthub distils them) with the target's features at
    layer_ids and the draft vocabulary's maps into `out`; return what was written. dtype: the stored features' (the
    offline store's bf16 by default: the trainers read the same values, each casting to its own training dtype)."""
    from datasets import Dataset

    out = Path(out)
    (out / "hidden_states").mkdir(parents=True, exist_ok=True)
    ids = [*layer_ids, target.config.num_hidden_layers]  # then id N: the last layer's output, pre-norm
    device = next(target.parameters()).device
    for i, row in enumerate(tqdm(rows, desc="speculators features", unit="sample")):
        tokens = torch.tensor(row["input_ids"], dtype=torch.long)
        with lm_head_input(target, logits=False):  # no logits wanted: the lm_head on one position only
            features, _ = layer_features(target, tokens[None].to(device), None, ids)  # (1, T, (K+1)·H)
        hidden = features[0].reshape(len(tokens), len(ids), -1).to(dtype).cpu().contiguous()
        save_file({"token_ids": tokens, "hidden_states": hidden}, str(out / "hidden_states" / f"hs_{i}.safetensors"))
    table = Dataset.from_dict(
        {
            "input_ids": [list(map(int, r["input_ids"])) for r in rows],
            "loss_mask": [list(map(int, r["loss_mask"])) for r in rows],
            "seq_len": [len(r["input_ids"]) for r in rows],
        }
    )
    table.set_format("torch")
    table.save_to_disk(str(out))
    size = vocab.size
    np.save(out / f"d2t-{size}.npy", vocab.d2t().cpu().numpy())
    np.save(out / f"t2d-{size}.npy", vocab.t2d(target.config.vocab_size).cpu().numpy())
    written = {"rows": len(rows), "tokens": sum(len(r["input_ids"]) for r in rows), "layer_ids": ids,
               "draft_vocab_size": size, "dtype": str(dtype).removeprefix("torch.")}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(written, indent=2))
    return written
