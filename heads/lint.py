"""Checks every drafter export must pass before it is written: shapes, maps and explicit flags.

The failures these catch are the silent ones — vLLM loads a checkpoint with a wrong fc width,
defaults a missing norm flag, or guesses layer ids, and acceptance collapses when served.
"""

from __future__ import annotations

import torch


def lint_eagle3(config: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Problems with an EAGLE-3 speculators-format checkpoint (config.json dict + its tensors); [] = clean."""
    problems = []
    layer = config.get("transformer_layer_config") or {}
    H, Ht, D = layer.get("hidden_size"), config.get("target_hidden_size"), config.get("draft_vocab_size")
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list) or len(ids) != 3 or not all(isinstance(i, int) for i in ids):
        problems.append(f"eagle_aux_hidden_state_layer_ids must list 3 explicit layer ids, got {ids!r}")
    elif ids != sorted(ids):
        problems.append(
            f"eagle_aux_hidden_state_layer_ids={ids} must be ascending "
            "(vLLM and SGLang concatenate the layers in layer order, so fc's columns would be misread)"
        )
    for flag in ("norm_before_residual",):
        if not isinstance(config.get(flag), bool):
            problems.append(
                f"{flag} must be an explicit true/false (vLLM defaults a missing one), got {config.get(flag)!r}"
            )
    if "model_type" in config:
        problems.append(
            "a speculators config has no top-level model_type (vLLM would not route it to the speculators loader)"
        )
    if not all(isinstance(x, int) for x in (H, Ht, D)):
        return problems + [f"hidden_size, target_hidden_size and draft_vocab_size must be set, got {H}, {Ht}, {D}"]

    def shape(name):
        return tuple(tensors[name].shape) if name in tensors else None

    expect = {
        "fc.weight": (H, 3 * Ht),
        "lm_head.weight": (D, H),
        "d2t": (D,),
        "layers.0.self_attn.q_proj.weight": (
            layer.get("num_attention_heads", 0)
            * (layer.get("head_dim") or H // max(layer.get("num_attention_heads", 1), 1)),
            2 * H,
        ),
        "norm.weight": (H,),
        "layers.0.hidden_norm.weight": (H,),
    }
    for name, want in expect.items():
        if shape(name) != want:
            problems.append(f"{name} has shape {shape(name)}, expected {want}")
    for proj in ("k_proj", "v_proj"):
        got = shape(f"layers.0.self_attn.{proj}.weight")
        if got is None or got[1] != 2 * H:
            problems.append(
                f"layers.0.self_attn.{proj}.weight takes input width {got and got[1]}, expected 2·hidden = {2 * H}"
            )
    if "t2d" in tensors and "d2t" in tensors and shape("d2t") == (D,):
        t2d, d2t = tensors["t2d"], tensors["d2t"]
        if t2d.dtype != torch.bool or int(t2d.sum()) != D:
            problems.append(f"t2d must be a bool mask with draft_vocab_size={D} entries set, has {int(t2d.sum())}")
        else:
            mapped = d2t.long() + torch.arange(D)
            if d2t.dtype != torch.int64 or not torch.equal(mapped, t2d.nonzero().flatten()):
                problems.append(
                    "d2t does not map draft ids onto exactly the target ids t2d marks "
                    "(target = draft + d2t[draft], int64)"
                )
    else:
        problems.append("d2t and t2d must both be present")
    return problems


def lint_peagle(config: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Problems with a P-EAGLE speculators checkpoint: EAGLE-3's, plus the mask token and mask_hidden."""
    problems = lint_eagle3(config, tensors)
    layer = config.get("transformer_layer_config") or {}
    vocab, mask_id = layer.get("vocab_size"), config.get("mask_token_id")
    if not isinstance(mask_id, int) or not isinstance(vocab, int) or not 0 <= mask_id < vocab:
        problems.append(
            f"mask_token_id={mask_id!r} must be an id in 0..vocab_size−1 = {vocab and vocab - 1} "
            "(vLLM looks it up in the embedding unchecked)"
        )
    ids, Ht = config.get("eagle_aux_hidden_state_layer_ids") or [], config.get("target_hidden_size")
    want = (len(ids) * Ht,) if isinstance(Ht, int) else None
    got = tuple(tensors["mask_hidden"].shape) if "mask_hidden" in tensors else None
    if got != want:
        problems.append(
            f"mask_hidden has shape {got}, expected {want} (layer ids × target_hidden_size, the pre-fc feature space; "
            "vLLM refuses to start without it)"
        )
    return problems
