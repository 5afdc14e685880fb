"""Checks every drafter export must pass before it is written: shapes, maps and explicit flags.

The failures these catch are the silent ones — vLLM loads a checkpoint with a wrong fc width,
defaults a missing norm flag, or guesses layer ids, and acceptance collapses when served.
"""

from __future__ import annotations

import torch

NORM_FLAGS = ("norm_before_fc", "fc_norm", "norm_output")  # speculators' optional norms (absent = false)


def _layer_problems(layer: dict) -> list[str]:
    """The decoder layer drafthub runs is one llama layer with plain RoPE: anything else is refused by name."""
    problems = []
    if layer.get("model_type", "llama") != "llama":
        problems.append(
            f"transformer_layer_config.model_type={layer['model_type']!r}: drafthub runs llama decoder layers only "
            "(vLLM would build that family's layer, e.g. Qwen3's q/k norms)"
        )
    if layer.get("num_hidden_layers", 1) != 1:
        problems.append(f"transformer_layer_config.num_hidden_layers={layer['num_hidden_layers']}: drafthub runs 1")
    for bias in ("attention_bias", "mlp_bias"):
        if layer.get(bias):
            problems.append(f"transformer_layer_config.{bias}=true: drafthub's decoder layer has no biases")
    rope_type = (layer.get("rope_parameters") or {}).get("rope_type", "default")
    if rope_type != "default":
        problems.append(
            f"transformer_layer_config.rope_parameters.rope_type={rope_type!r}: drafthub's engine runs plain RoPE "
            "(vLLM would scale it), so its drafts would differ from the served ones"
        )
    return problems


def lint_eagle3(config: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Problems with an EAGLE-3 speculators-format checkpoint (config.json dict + its tensors); [] = clean.

    Every field vLLM honours is either accepted as vLLM reads it or named here: null target_hidden_size
    (= hidden_size), rope_parameters / rope_theta, the optional norms and their tensors, a shared
    embed_tokens or lm_head, and d2t/t2d (present exactly when the draft vocabulary is reduced)."""
    problems = []
    layer = config.get("transformer_layer_config") or {}
    H, D, V = layer.get("hidden_size"), config.get("draft_vocab_size"), layer.get("vocab_size")
    Ht = config.get("target_hidden_size", H) or H  # null: vLLM takes the drafter's width
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list) or len(ids) != 3 or not all(isinstance(i, int) for i in ids):
        problems.append(f"eagle_aux_hidden_state_layer_ids must list 3 explicit layer ids, got {ids!r}")
    elif ids != sorted(ids):
        problems.append(
            f"eagle_aux_hidden_state_layer_ids={ids} must be ascending "
            "(vLLM and SGLang concatenate the layers in layer order, so fc's columns would be misread)"
        )
    if not isinstance(config.get("norm_before_residual"), bool):
        problems.append(
            "norm_before_residual must be an explicit true/false (vLLM defaults a missing one to true, "
            f"speculators to false), got {config.get('norm_before_residual')!r}"
        )
    for flag in NORM_FLAGS:
        if not isinstance(config.get(flag, False), bool):
            problems.append(f"{flag} must be true or false, got {config[flag]!r}")
    if "model_type" in config:
        problems.append(
            "a speculators config has no top-level model_type (vLLM would not route it to the speculators loader)"
        )
    problems += _layer_problems(layer)
    if not all(isinstance(x, int) for x in (H, Ht, D, V)):
        return problems + [f"hidden_size, vocab_size and draft_vocab_size must be set, got {H}, {V}, {D}"]

    def shape(name):
        return tuple(tensors[name].shape) if name in tensors else None

    expect = {
        "fc.weight": (H, 3 * Ht),
        "layers.0.self_attn.q_proj.weight": (
            layer.get("num_attention_heads", 0)
            * (layer.get("head_dim") or H // max(layer.get("num_attention_heads", 1), 1)),
            2 * H,
        ),
        "norm.weight": (H,),
        "layers.0.hidden_norm.weight": (H,),
    }
    # Absent = the target's own, as vLLM shares them; its lm_head only fits when the draft vocabulary is its own.
    optional = {"embed_tokens.weight": (V, H)} | ({"lm_head.weight": (D, H)} if D == V else {})
    expect |= {"lm_head.weight": (D, H)} if D != V else {}
    expect |= {name: want for name, want in optional.items() if name in tensors}
    if config.get("norm_before_fc"):
        expect["input_norm.weight"] = (3 * Ht,)
    if config.get("fc_norm"):
        expect |= {f"fc_norm.{i}.weight": (Ht,) for i in range(3)}
    for name, want in expect.items():
        if shape(name) != want:
            problems.append(f"{name} has shape {shape(name)}, expected {want}")
    if "input_norm.weight" in tensors and not config.get("norm_before_fc"):
        problems.append("input_norm.weight is present but norm_before_fc is false: vLLM would drop it silently")
    if any(name.startswith("fc_norm.") for name in tensors) and not config.get("fc_norm"):
        problems.append("fc_norm.* tensors are present but fc_norm is false: vLLM refuses to load them")
    for proj in ("k_proj", "v_proj"):
        got = shape(f"layers.0.self_attn.{proj}.weight")
        if got is None or got[1] != 2 * H:
            problems.append(
                f"layers.0.self_attn.{proj}.weight takes input width {got and got[1]}, expected 2·hidden = {2 * H}"
            )
    maps = [name for name in ("d2t", "t2d") if name in tensors]
    if D == V and maps:
        problems.append(
            f"{' and '.join(maps)} must be left out when draft_vocab_size equals vocab_size ({V}): vLLM 0.32 has no "
            "mapping then and refuses the checkpoint"
        )
    elif D != V and len(maps) < 2:
        problems.append(f"d2t and t2d must both be present with a reduced draft vocabulary ({D} of {V})")
    elif D != V and shape("d2t") != (D,):
        problems.append(f"d2t has shape {shape('d2t')}, expected ({D},)")
    elif D != V:
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
    return problems


def lint_peagle(config: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Problems with a P-EAGLE speculators checkpoint: EAGLE-3's, plus the mask token and mask_hidden."""
    problems = lint_eagle3(config, tensors)
    problems += [f"{flag}=true: drafthub's P-EAGLE does not implement it" for flag in NORM_FLAGS if config.get(flag)]
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


BLOCK_NORMS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm")
# names other trainers' checkpoints use that vLLM renames on load (qwen3_dflash.py) but drafthub does not read
BLOCK_ALIASES = {"midlayer.": "layers.0.", "encoder.fc.": "fc.", "encoder.output_norm_enc.": "hidden_norm."}


def _block_layer_ids(config: dict) -> list[str]:
    """Where a block export's layer ids disagree: vLLM's capture ids against every 0-based spelling + 1."""
    ours = config.get("eagle_aux_hidden_state_layer_ids")
    spellings = {
        "target_layer_ids": config.get("target_layer_ids"),
        "dflash_config.target_layer_ids": (config.get("dflash_config") or {}).get("target_layer_ids"),
    }
    problems = []
    for key, ids in spellings.items():
        if ids is None or ours is None or [i + 1 for i in ids] == list(ours):
            continue
        shifted = (
            " (off by one: they are 0-based layer outputs, eagle_aux_hidden_state_layer_ids − 1)"
            if list(ids) == list(ours) or [i + 2 for i in ids] == list(ours)
            else ""
        )
        problems.append(
            f"{key}={ids} is not eagle_aux_hidden_state_layer_ids={ours} minus one{shifted}: engines read one or "
            "the other, and a shifted id feeds every feature from the wrong layer with no error"
        )
    if ours is None and all(ids is None for ids in spellings.values()):
        problems.append("no layer ids (eagle_aux_hidden_state_layer_ids / target_layer_ids): vLLM would guess them")
    return problems


def lint_block(config: dict, tensors: dict[str, torch.Tensor], *, anchor_first: bool) -> list[str]:
    """Problems with a block drafter's export (DFlash, DFlash2, DSpark) that engines serve silently wrong.

    anchor_first: the layout the drafter was trained in (DSpark: every slot drafts the next position;
    DFlash, DFlash2: the mask slots draft their own positions). Named here: a `sample_from_anchor` that
    disagrees with it (or is missing where a parser's default would disagree), causal-attention flags on
    a bidirectionally trained block, layer ids whose spellings disagree (the off-by-one between capture
    ids and 0-based outputs), two mask ids, RoPE read other than trained, and missing norm tensors
    (vLLM's loader leaves them uninitialised without an error)."""
    problems = []
    dflash = config.get("dflash_config") or {}
    top, nested = config.get("sample_from_anchor"), dflash.get("sample_from_anchor")
    if anchor_first and (top is not True or nested not in (None, True)):
        problems.append(
            f"sample_from_anchor={top!r} (dflash_config: {nested!r}): this drafter was trained anchor-first and "
            "must say true at the top level (speculators' parser reads a missing key as false); served fill-in, "
            "every draft lands one position off"
        )
    if not anchor_first and (top or nested):
        problems.append(
            "sample_from_anchor=true: this drafter was trained fill-in (mask slots draft their own positions); "
            "served anchor-first every draft lands one position off — write false or leave it out"
        )
    layer_types = config.get("layer_types") or []
    if config.get("is_causal") or dflash.get("causal") or any(t != "full_attention" for t in layer_types):
        problems.append(
            f"causal attention (is_causal={config.get('is_causal')!r}, dflash_config.causal={dflash.get('causal')!r}, "
            f"layer_types={layer_types}): the block was trained bidirectional; drop these flags"
        )
    problems += _block_layer_ids(config)
    masks = {config.get("mask_token_id"), dflash.get("mask_token_id")} - {None}
    if len(masks) != 1:
        problems.append(
            f"mask token ids {sorted(masks)} (top level, dflash_config): vLLM takes dflash_config's first; "
            "write the trained id once"
        )
    if config.get("is_neox_style", True) is not True:
        problems.append("is_neox_style=false: the drafter was trained with rotate-half (NeoX) RoPE")
    if not (config.get("rope_parameters") or {}).get("rope_theta") and config.get("rope_theta") is None:
        problems.append("no rope_theta: vLLM's DFlash backbone defaults it to 1e6, not the trained base")
    norms = ["hidden_norm.weight", "norm.weight"] + [
        f"layers.{i}.{n}.weight" for i in range(config.get("num_hidden_layers", 0)) for n in BLOCK_NORMS
    ]
    missing = [n for n in norms if n not in tensors]
    if missing:
        aliased = sorted({a for a in BLOCK_ALIASES for name in tensors if name.startswith(a)})
        hint = f"; rename {aliased} to {[BLOCK_ALIASES[a] for a in aliased]}" if aliased else ""
        problems.append(
            f"missing norm tensors {missing[:3]}: vLLM's block loader leaves absent weights uninitialised without "
            f"an error{hint}"
        )
    return problems
