"""Export EAGLE drafters: EAGLE-3 as the speculators directory vLLM serves as is plus SGLang's
LlamaForCausalLMEagle3 layout in `sglang/`; EAGLE-1 as the one-layer llama directory vLLM's
`eagle` method loads. Each with drafthub.json and a model card."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from heads.card import render_model_card
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.formats.hf_causal import PROVENANCE
from heads.formats.speculators import save_speculators, sglang_tensors
from heads.formats.staging import staged_directory


def sglang_config(drafter: Eagle3Drafter) -> dict:
    """SGLang counts aux layer ids from the first decoder layer's output (k − 1 in HF hidden_states ids)."""
    a = drafter.arch
    return {
        **a.llama_config(),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": a.draft_vocab_size,
        "target_hidden_size": a.target_hidden_size,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in a.layer_ids], "use_aux_hidden_state": True},
    }


def export_eagle3(drafter: Eagle3Drafter, out_dir: str | Path, provenance: dict, verifier: dict, speculative_tokens: int) -> Path:
    provenance = {**provenance, "drafter_config": {"layer_ids": list(drafter.arch.layer_ids), "draft_vocab_size": drafter.arch.draft_vocab_size, "num_speculative_tokens": speculative_tokens}}
    with staged_directory(out_dir) as tmp:
        save_speculators(drafter, tmp, verifier, speculative_tokens)  # linted first
        (tmp / "sglang").mkdir()
        (tmp / "sglang" / "config.json").write_text(json.dumps(sglang_config(drafter), indent=2))
        save_file(sglang_tensors(drafter), str(tmp / "sglang" / "model.safetensors"), metadata={"format": "pt"})
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / "README.md").write_text(render_model_card(provenance))
    return Path(out_dir)


def export_eagle1(drafter: Eagle1Drafter, out_dir: str | Path, provenance: dict) -> Path:
    with staged_directory(out_dir) as tmp:
        drafter.save_pretrained(tmp)
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / "README.md").write_text(render_model_card(provenance))
    return Path(out_dir)
