"""EAGLE-3 in the speculators format vLLM serves directly (`speculative_config={"model": DIR}`), and
in SGLang's LlamaForCausalLMEagle3 layout.

speculators: config.json without a top-level model_type, `speculators_model_type: eagle3`, a
llama-style `transformer_layer_config`, `draft_vocab_size`, `target_hidden_size`, explicit
`eagle_aux_hidden_state_layer_ids` (HF output_hidden_states indices) and `norm_before_residual`,
and `speculators_config` (algorithm, proposal methods, verifier). Tensors are the drafter's own
names (heads/eagle.py): embed_tokens, fc [H, 3·H_target], layers.0.* (q/k/v input 2H,
hidden_norm), norm, lm_head [D, H], d2t (int64) and t2d (bool) — the maps only with a reduced draft
vocabulary, as vLLM requires. Every checkpoint passes heads.lint before it is written or read; checkpoints
saved by the speculators library itself load as vLLM loads them (target_hidden_size null, rope_parameters,
the optional input_norm / fc_norm / norm_output, a shared embed_tokens or lm_head).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from heads.eagle import Eagle3Drafter, EagleArch
from heads.errors import HeadsError
from heads.lint import lint_eagle3

CONFIG, WEIGHTS = "config.json", "model.safetensors"


def speculators_config(drafter: Eagle3Drafter, verifier: dict, speculative_tokens: int) -> dict:
    a = drafter.arch
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.1.0",
        "transformer_layer_config": {
            **a.llama_config(),
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "mlp_bias": False,
        },
        "draft_vocab_size": a.draft_vocab_size,
        "target_hidden_size": a.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(a.layer_ids),
        "norm_before_residual": a.norm_before_residual,
        "norm_before_fc": a.norm_before_fc,
        "fc_norm": a.fc_norm,
        "norm_output": a.norm_output,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
    }


def save_speculators(drafter: Eagle3Drafter, path: str | Path, verifier: dict, speculative_tokens: int) -> None:
    """Write config.json + model.safetensors after the linter passes (HeadsError otherwise)."""
    write_checked(path, speculators_config(drafter, verifier, speculative_tokens), drafter, lint_eagle3, "an EAGLE-3")


def load_speculators(path: str | Path, target=None) -> Eagle3Drafter:
    """Read a speculators-format EAGLE-3 directory (ours or another tool's) into our drafter, linted first.

    What such a checkpoint may leave out is filled as vLLM fills it: no embed_tokens (or, with the full
    vocabulary, no lm_head) = the target's own, shared; no d2t/t2d with the full vocabulary = the identity.
    """
    config, tensors = read_checked(path, lint_eagle3, "an EAGLE-3")
    arch = arch_from_config(config)
    return filled(Eagle3Drafter(arch), with_defaults(arch, tensors, target, path), path)


def check_speculators(path: str | Path) -> None:
    """The format checks alone (the publish gate's): no target needed."""
    read_checked(path, lint_eagle3, "an EAGLE-3")


def with_defaults(arch: EagleArch, tensors: dict[str, torch.Tensor], target, path) -> dict[str, torch.Tensor]:
    """The tensors a linted checkpoint may omit, filled in (see load_speculators)."""
    out = dict(tensors)
    if "d2t" not in out:  # the linter allows it only when the draft vocabulary is the target's
        out["d2t"] = torch.zeros(arch.draft_vocab_size, dtype=torch.long)
        out["t2d"] = torch.ones(arch.vocab_size, dtype=torch.bool)
    shared = {"embed_tokens.weight": "get_input_embeddings", "lm_head.weight": "get_output_embeddings"}
    for name, getter in shared.items():
        if name not in out:
            if target is None:
                raise HeadsError(f"{path} has no {name}: it shares the target's; load it with its target")
            out[name] = getattr(target, getter)().weight.detach().float().cpu()
    return out


def write_checked(path: str | Path, config: dict, drafter: torch.nn.Module, lint, what: str) -> None:
    """config.json + model.safetensors of `drafter`, refused with the linter's first problem.

    With the full vocabulary (draft_vocab_size = vocab_size) d2t and t2d are left out: vLLM 0.32 has no
    mapping parameter then and refuses to load a checkpoint that carries one."""
    tensors = {k: v.detach().contiguous() for k, v in drafter.state_dict().items()}
    if config["draft_vocab_size"] == config["transformer_layer_config"]["vocab_size"]:
        tensors = {k: v for k, v in tensors.items() if k not in ("d2t", "t2d")}
    problems = lint(config, tensors)
    if problems:
        raise HeadsError(f"refusing to write {what} checkpoint that would not serve: {problems[0]}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG).write_text(json.dumps(config, indent=2))
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})


def read_checked(path: str | Path, lint, what: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, tensors) of a speculators-format directory the linter passes (HeadsError otherwise)."""
    path = Path(path)
    if not (path / CONFIG).exists() or not (path / WEIGHTS).exists():
        raise HeadsError(f"{path} is not {what} checkpoint: it needs {CONFIG} and {WEIGHTS}")
    config = json.loads((path / CONFIG).read_text())
    tensors = load_file(str(path / WEIGHTS))
    problems = lint(config, tensors)
    if problems:
        raise HeadsError(
            f"{path} is not a usable {what.removeprefix('an ').removeprefix('a ')} checkpoint: {problems[0]}"
        )
    return config, tensors


def filled(drafter: torch.nn.Module, tensors: dict[str, torch.Tensor], path) -> torch.nn.Module:
    """`drafter` with exactly these tensors loaded; HeadsError naming what is missing or extra."""
    missing, unexpected = drafter.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise HeadsError(
            f"{path}/{WEIGHTS} does not match its config: missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]}"
        )
    return drafter


def rope_theta(layer: dict) -> float:
    """RoPE base as vLLM reads it: rope_parameters' rope_theta first, then a flat rope_theta, else 10000."""
    return float((layer.get("rope_parameters") or {}).get("rope_theta") or layer.get("rope_theta") or 10000.0)


def arch_from_config(config: dict) -> EagleArch:
    """The drafter shape a (linted) speculators config.json describes."""
    layer = config["transformer_layer_config"]
    return EagleArch(
        hidden_size=layer["hidden_size"],
        num_attention_heads=layer["num_attention_heads"],
        num_key_value_heads=layer["num_key_value_heads"],
        intermediate_size=layer["intermediate_size"],
        vocab_size=layer["vocab_size"],
        draft_vocab_size=config["draft_vocab_size"],
        target_hidden_size=config["target_hidden_size"] or layer["hidden_size"],  # null: the drafter's width
        layer_ids=list(config["eagle_aux_hidden_state_layer_ids"]),
        rms_norm_eps=layer["rms_norm_eps"],
        rope_theta=rope_theta(layer),
        max_position_embeddings=layer["max_position_embeddings"],
        norm_before_residual=config["norm_before_residual"],
        norm_before_fc=config.get("norm_before_fc", False),
        fc_norm=config.get("fc_norm", False),
        norm_output=config.get("norm_output", False),
    )
