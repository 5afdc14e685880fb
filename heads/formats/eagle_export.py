"""EAGLE-3's serving directory, written from the native checkpoint: the speculators files vLLM serves
as they are, plus SGLang's LlamaForCausalLMEagle3 layout in `sglang/`. (EAGLE-1's native checkpoint
already is the layout vLLM's `eagle` method loads; the family table copies it.) Provenance and the
model card are added by publishing (heads.families.write_provenance)."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from heads.eagle import Eagle3Drafter
from heads.formats.speculators import save_speculators, sglang_tensors


def sglang_config(drafter: Eagle3Drafter) -> dict:
    """SGLang counts aux layer ids from the first decoder layer's output (k − 1 in HF hidden_states ids)."""
    a = drafter.arch
    return {
        **a.llama_config(),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": a.draft_vocab_size,
        "target_hidden_size": a.target_hidden_size,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": [i - 1 for i in a.layer_ids],
            "use_aux_hidden_state": True,
        },
    }


def write_eagle3(drafter: Eagle3Drafter, out: Path, verifier: dict, speculative_tokens: int) -> None:
    """Fill `out` with the speculators files (linted first) and the SGLang layout."""
    save_speculators(drafter, out, verifier, speculative_tokens)
    (out / "sglang").mkdir()
    (out / "sglang" / "config.json").write_text(json.dumps(sglang_config(drafter), indent=2))
    save_file(sglang_tensors(drafter), str(out / "sglang" / "model.safetensors"), metadata={"format": "pt"})
