"""Architectures of popular targets, so the dry-run planner works without the network.

Copied from each model's config.json on the Hub (architecture fields only). A target that is not
listed is planned from a local directory holding its config.json, or from the HF cache.
"""

from __future__ import annotations

_LLAMA3 = {
    "model_type": "llama",
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}

KNOWN_TARGETS: dict[str, dict] = {
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA3
    | {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "meta-llama/Llama-3.1-70B-Instruct": _LLAMA3
    | {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA3
    | {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "meta-llama/Llama-3.2-1B-Instruct": _LLAMA3
    | {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "lmsys/vicuna-7b-v1.3": {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
    },
}
