"""The independent draft LM: a small causal LM sharing the target's tokenizer.

It needs no target signal, so any consumer that runs "draft model" speculation (transformers'
`assistant_model`, vLLM's `draft_model` method) can use its plain HF export.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from heads.config import DraftLMConfig
from heads.errors import HeadsError


class DraftLM(nn.Module):
    kind = "draft_lm"
    target_signals: tuple = ()  # needs nothing from the target beyond the tokens

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    @classmethod
    def from_config(cls, cfg: DraftLMConfig, target_config, tokenizer, trust_remote_code: bool = False) -> "DraftLM":
        """A fresh Llama of the configured size, or `cfg.init` checked against the target's vocabulary."""
        if cfg.init:
            model = AutoModelForCausalLM.from_pretrained(
                cfg.init, revision=cfg.revision, trust_remote_code=trust_remote_code, use_safetensors=True
            )
            check_vocab(
                cfg.init, model.config.vocab_size, tokenizer, revision=cfg.revision, trust_remote_code=trust_remote_code
            )
        else:
            model = LlamaForCausalLM(
                LlamaConfig(
                    vocab_size=target_config.vocab_size,
                    hidden_size=cfg.hidden_size,
                    intermediate_size=cfg.intermediate_size,
                    num_hidden_layers=cfg.num_hidden_layers,
                    num_attention_heads=cfg.num_attention_heads,
                    num_key_value_heads=cfg.num_key_value_heads,
                    max_position_embeddings=cfg.max_position_embeddings,
                    tie_word_embeddings=cfg.tie_word_embeddings,
                    rope_theta=getattr(target_config, "rope_theta", 10000.0) or 10000.0,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=target_config.eos_token_id,
                    bos_token_id=getattr(target_config, "bos_token_id", None),
                )
            )
        model.generation_config.eos_token_id = target_config.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        if cfg.lora.enabled:
            from peft import LoraConfig as PeftLoraConfig
            from peft import get_peft_model

            model = get_peft_model(
                model,
                PeftLoraConfig(
                    r=cfg.lora.r,
                    lora_alpha=cfg.lora.alpha,
                    lora_dropout=cfg.lora.dropout,
                    target_modules=list(cfg.lora.target_modules),
                    task_type="CAUSAL_LM",
                ),
            )
        return cls(model)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "DraftLM":
        """The causal LM at `path`; a config.json its weights do not fit (a hand-edited vocab_size, say) is one line
        naming the tensor, where transformers prints a table and raises."""
        from transformers.utils import logging as hf_logging

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its mismatch table goes to the log; the error below names the tensor
        try:
            return cls(AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, **kwargs))
        except RuntimeError as e:
            if "ignore_mismatched_sizes" not in str(e):
                raise
            raise HeadsError(
                f"{path}/config.json does not fit its weights: {_mismatch(path)}; restore the exported "
                "config.json or re-export the drafter"
            ) from None
        finally:
            hf_logging.set_verbosity(level)

    def forward(self, input_ids: torch.Tensor, attention_mask=None, **kwargs):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def merged(self) -> nn.Module:
        """The plain causal LM (LoRA adapters merged in); what gets exported and served."""
        model = self.model
        if hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        return model

    def save_pretrained(self, path: str | Path) -> None:
        self.merged().save_pretrained(path, safe_serialization=True)


def check_vocab(init: str, model_vocab_size: int, target_tokenizer, revision=None, trust_remote_code=False) -> None:
    """Raise unless the draft at `init` shares the target's tokenizer vocabulary."""
    try:
        draft_tok = AutoTokenizer.from_pretrained(init, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:  # no tokenizer files (OSError), or none transformers can build (ValueError)
        files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
        absent = isinstance(e, OSError) or (Path(init).is_dir() and not any((Path(init) / f).exists() for f in files))
        what = "no tokenizer" if absent else f"no tokenizer that loads ({str(e).splitlines()[0]})"
        raise HeadsError(f"drafter.init={init!r} has {what}; the draft must ship the target's tokenizer") from None
    if draft_tok.get_vocab() != target_tokenizer.get_vocab():
        raise HeadsError(
            f"vocabulary mismatch: drafter.init={init!r} has {len(draft_tok)} tokens, the target "
            f"{len(target_tokenizer)}, or they map tokens to different ids; pick a draft from the target's family"
        )
    if model_vocab_size < len(target_tokenizer):
        raise HeadsError(
            f"drafter.init={init!r} has {model_vocab_size} embedding rows for {len(target_tokenizer)} tokens; "
            "it can't score the target's vocabulary"
        )


def _mismatch(path: str | Path) -> str:
    """The first tensor whose shape the config's model does not have, as 'name: weights (a, b), config (c, d)'."""
    from safetensors import safe_open
    from transformers import AutoConfig

    with torch.device("meta"):
        shapes = {
            k: tuple(v.shape)
            for k, v in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).state_dict().items()
        }
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                stored = tuple(f.get_slice(name).get_shape())
                if name in shapes and shapes[name] != stored:
                    return f"{name} is {stored} in the weights, {shapes[name]} by the config"
    return "a tensor's shape differs"
