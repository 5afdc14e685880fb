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
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": a.hidden_size,
        "intermediate_size": a.intermediate_size,
        "num_attention_heads": a.num_attention_heads,
        "num_key_value_heads": a.num_key_value_heads,
        "head_dim": a.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": a.rms_norm_eps,
        "rope_theta": a.rope_theta,
        "max_position_embeddings": a.max_position_embeddings,
        "vocab_size": a.vocab_size,
        "draft_vocab_size": a.draft_vocab_size,
        "target_hidden_size": a.target_hidden_size,
        "tie_word_embeddings": False,
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
