"""EAGLE-3: training-time test equals decoding, draft vocab maps, speculators export and the linter."""

import json

import pytest
import torch
from safetensors import safe_open

from distill.features.capture import layer_features
from heads.config import Eagle1Config, Eagle3Config
from heads.eagle import Eagle3Drafter
from heads.errors import HeadsError
from heads.families import FAMILIES, write_provenance
from heads.formats.speculators import load_speculators, speculators_config
from heads.lint import lint_eagle3
from heads.vocab import DraftVocab, build_draft_vocab, token_counts
from tests.exporting import export

IDS = [0, 1, 2]


@pytest.fixture(scope="module")
def drafter(target):
    torch.manual_seed(0)
    vocab, _ = build_draft_vocab(torch.arange(target.config.vocab_size).flip(0), 300)
    d = Eagle3Drafter.from_target(
        Eagle3Config(layer_ids=IDS, num_attention_heads=2, num_key_value_heads=1), target, vocab
    )
    with torch.no_grad():  # a trained-looking drafter: nothing is at its init value
        for name, p in d.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return d.eval()


def test_layer_ids_are_the_residual_stream_entering_each_decoder_layer(target, prompt_ids):
    ids = torch.tensor([prompt_ids[0]])
    seen = {}

    def record(k):
        def hook(module, args, kwargs):
            seen[k] = kwargs.get("hidden_states", args[0] if args else None)

        return hook

    hooks = [
        layer.register_forward_pre_hook(record(k), with_kwargs=True) for k, layer in enumerate(target.model.layers)
    ]
    hooks.append(
        target.model.norm.register_forward_pre_hook(lambda module, args: seen.__setitem__("norm_input", args[0]))
    )
    try:
        features, logits = layer_features(target, ids, None, [0, 1, 2])
    finally:
        for h in hooks:
            h.remove()
    H = target.config.hidden_size
    torch.testing.assert_close(features[..., :H], target.model.embed_tokens(ids))  # id 0 = embeddings
    torch.testing.assert_close(features[..., H : 2 * H], seen[1])  # id 1 = what enters layer 1
    # id N = 2 = the residual stream before the final norm, as vLLM and SGLang capture it (found by
    # the served check: transformers' hidden_states[N] is after the norm, and served τ fell short).
    torch.testing.assert_close(features[..., 2 * H :], seen["norm_input"])
    out = target(ids, output_hidden_states=True)
    torch.testing.assert_close(features[..., : 2 * H], torch.cat([out.hidden_states[k] for k in (0, 1)], -1))
    assert not torch.allclose(features[..., 2 * H :], out.hidden_states[2])
    torch.testing.assert_close(logits, out.logits)


def _with_norms(drafter, **flags):
    """`drafter` with speculators' optional norms switched on (their weights away from 1, as if trained)."""
    from dataclasses import replace

    out = Eagle3Drafter(replace(drafter.arch, **flags))
    missing, _ = out.load_state_dict(drafter.state_dict(), strict=False)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name in missing:
                p.uniform_(0.5, 1.5)
    return out.eval()


NORMS = {
    "plain": {},
    "norm_before_fc+norm_output": {"norm_before_fc": True, "norm_output": True},
    "fc_norm": {"fc_norm": True},
}


def test_training_time_test_computes_only_the_counted_logits_and_the_same_ones(drafter, target, prompt_ids):
    """With `counted` (the loss's tokens), step j returns the logits of exactly the entries whose token t+j+2 counts,
    equal to the whole forward's there: the lm_head is spared the prompt and padding positions."""
    ids = torch.tensor([prompt_ids[1][:24], prompt_ids[2][:24]])
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0  # a padded row
    counted = torch.zeros_like(ids, dtype=torch.bool)
    counted[0, 9:] = counted[1, 5:20] = True  # answers after different prompts
    features, _ = layer_features(target, ids, mask, IDS)
    with torch.no_grad():
        whole = drafter.ttt_logits(features, ids, mask, steps=3)
        some = drafter.ttt_logits(features, ids, mask, steps=3, counted=counted)
    for j, (full, kept) in enumerate(zip(whole, some)):
        span = ids.shape[1] - j - 2
        expected = full[:, :span][counted[:, j + 2 :]]
        assert kept.shape == expected.shape and kept.shape[0] == counted[:, j + 2 :].sum()
        torch.testing.assert_close(kept, expected)


@pytest.mark.parametrize("norms", NORMS, ids=list(NORMS))
def test_training_time_test_equals_step_by_step_decoding(drafter, target, prompt_ids, norms):
    """Step j at position t of the unrolled training forward = decoding the real entries up to t,
    then j drafted entries fed with the drafter's own outputs (what the engine does) — also with
    speculators' optional norms, which change what fc reads and what the next position reads."""
    drafter = _with_norms(drafter, **NORMS[norms])
    ids = torch.tensor([prompt_ids[1][:24]])
    features, _ = layer_features(target, ids, None, IDS)
    with torch.no_grad():
        ttt = drafter.ttt_logits(features, ids, torch.ones_like(ids), steps=3)
        for t in (0, 7, 19):
            cache = drafter.new_cache(1, ids.device)
            real = torch.arange(t + 1)[None]
            out = drafter.decode(
                cache,
                drafter.fuse(features[:, : t + 1]),
                ids[:, 1 : t + 2],
                real,
                torch.ones(1, t + 1, dtype=torch.bool),
            )
            hidden = out[:, -1:]
            for j in range(3):
                if j:
                    hidden = drafter.decode(
                        cache,
                        hidden,
                        ids[:, t + j + 1 : t + j + 2],
                        torch.tensor([[t + j]]),
                        torch.ones(1, 1, dtype=torch.bool),
                    )
                torch.testing.assert_close(drafter.logits(hidden[:, -1]), ttt[j][:, t], rtol=1e-4, atol=1e-4)


def test_draft_vocab_maps_every_draft_id_to_its_target_id():
    counts = torch.tensor([5, 0, 9, 1, 7, 0, 3, 2])
    vocab, report = build_draft_vocab(counts, 4, always=[5])
    assert vocab.draft_to_target.tolist() == [0, 2, 4, 5]  # the 3 most frequent + the forced end token, in id order
    assert (torch.arange(4) + vocab.d2t()).tolist() == [0, 2, 4, 5]
    assert vocab.t2d(8).tolist() == [True, False, True, False, True, True, False, False]
    assert report["coverage"] == pytest.approx((5 + 9 + 7 + 0) / 27)
    assert torch.equal(DraftVocab.from_d2t(vocab.d2t()).draft_to_target, vocab.draft_to_target)
    assert token_counts([[3, 3, 1, 2]], [[0, 1, 1, 0]], 4).tolist() == [0, 1, 0, 1]  # only assistant tokens count


def test_speculators_export_has_the_documented_fields_and_round_trips(tmp_path, drafter, target):
    verifier = {"name_or_path": "toyworld:micro", "architectures": ["LlamaForCausalLM"]}
    provenance = {
        "kind": "eagle3",
        "model_name": "e",
        "target": {"name_or_path": "toyworld:micro"},
        "recipe": {"recipe_name": "t"},
        "eval": {},
        "draft_vocab": {"draft_vocab_size": 300, "coverage": 0.97},
    }
    out = export(drafter, tmp_path / "d", verifier=verifier, num_speculative_tokens=3)
    write_provenance(out, {**FAMILIES["eagle3"].describe(out, {}), **provenance})  # as the publish stage adds it
    card = (out / "README.md").read_text()
    assert (
        "Target layers fused: [0, 1, 2]" in card
        and "300 tokens, covering 97.0%" in card
        and '"num_speculative_tokens": 3' in card
    )
    config = json.loads((out / "config.json").read_text())
    H, V = target.config.hidden_size, target.config.vocab_size
    assert "model_type" not in config and config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == IDS and config["norm_before_residual"] is False
    assert (config["draft_vocab_size"], config["target_hidden_size"]) == (300, H)
    assert config["transformer_layer_config"]["model_type"] == "llama"
    sc = config["speculators_config"]
    assert sc["algorithm"] == "eagle3" and sc["default_proposal_method"] == "greedy" and sc["verifier"] == verifier
    assert (
        sc["proposal_methods"][0]["proposal_type"] == "greedy" and sc["proposal_methods"][0]["speculative_tokens"] == 3
    )
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert (
        shapes["fc.weight"] == (H, 3 * H)
        and shapes["lm_head.weight"] == (300, H)
        and shapes["embed_tokens.weight"] == (V, H)
    )
    assert shapes["layers.0.self_attn.q_proj.weight"][1] == shapes["layers.0.self_attn.k_proj.weight"][1] == 2 * H
    assert (
        shapes["d2t"] == (300,)
        and shapes["t2d"] == (V,)
        and "layers.0.hidden_norm.weight" in shapes
        and "norm.weight" in shapes
    )
    with safe_open(str(out / "sglang" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "midlayer.self_attn.q_proj.weight" in names and not any(
        n.startswith(("layers.", "embed_tokens")) for n in names
    )
    assert json.loads((out / "sglang" / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ] == [i - 1 for i in IDS]

    loaded = load_speculators(out)
    for (name, a), (_, b) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    features = torch.randn(1, 9, 3 * H)
    ids = torch.randint(0, V, (1, 9))
    with torch.no_grad():
        for a, b in zip(
            drafter.ttt_logits(features, ids, torch.ones_like(ids), 2),
            loaded.eval().ttt_logits(features, ids, torch.ones_like(ids), 2),
        ):
            assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_linter_rejects_wrong_fc_shapes_and_implicit_layer_ids(drafter):
    config = speculators_config(drafter, {"name_or_path": "t", "architectures": []}, 3)
    tensors = dict(drafter.state_dict())
    assert lint_eagle3(config, tensors) == []
    bad = {**tensors, "fc.weight": torch.zeros(drafter.arch.hidden_size, 2 * drafter.arch.target_hidden_size)}
    assert any(p.startswith("fc.weight has shape") for p in lint_eagle3(config, bad))
    assert any("layer ids" in p for p in lint_eagle3({**config, "eagle_aux_hidden_state_layer_ids": None}, tensors))
    # vLLM concatenates aux layers in layer order (the served check passed an export listing [2, 1, 0]),
    # so a descending list would have fc's columns misread: rejected here and at construction.
    assert any(
        "must be ascending" in p
        for p in lint_eagle3({**config, "eagle_aux_hidden_state_layer_ids": [2, 1, 0]}, tensors)
    )
    assert any(
        "norm_before_residual" in p
        for p in lint_eagle3({k: v for k, v in config.items() if k != "norm_before_residual"}, tensors)
    )
    assert any("d2t" in p for p in lint_eagle3(config, {**tensors, "d2t": tensors["d2t"] + 1}))
    # Every speculators field vLLM honours is accepted as vLLM reads it or refused by name, never ignored.
    layer = config["transformer_layer_config"]
    H = layer["hidden_size"]
    refused = {
        "model_type='qwen3'": ({**config, "transformer_layer_config": {**layer, "model_type": "qwen3"}}, tensors),
        "num_hidden_layers=2": ({**config, "transformer_layer_config": {**layer, "num_hidden_layers": 2}}, tensors),
        "attention_bias=true": ({**config, "transformer_layer_config": {**layer, "attention_bias": True}}, tensors),
        "rope_type='llama3'": (
            {**config, "transformer_layer_config": {**layer, "rope_parameters": {"rope_type": "llama3"}}},
            tensors,
        ),
        "input_norm.weight is present but norm_before_fc is false": (
            config,
            {**tensors, "input_norm.weight": torch.ones(3 * H)},
        ),
        "fc_norm.* tensors are present but fc_norm is false": (config, {**tensors, "fc_norm.0.weight": torch.ones(H)}),
        "input_norm.weight has shape None": ({**config, "norm_before_fc": True}, tensors),
        "norm_output must be true or false": ({**config, "norm_output": "yes"}, tensors),
        "lm_head.weight has shape None": (config, {k: v for k, v in tensors.items() if k != "lm_head.weight"}),
    }
    for message, (cfg, tens) in refused.items():
        assert any(message in p for p in lint_eagle3(cfg, tens)), (message, lint_eagle3(cfg, tens))
    full = {**config, "draft_vocab_size": layer["vocab_size"], "target_hidden_size": None}
    shared = {k: v for k, v in tensors.items() if k not in ("d2t", "t2d", "embed_tokens.weight", "lm_head.weight")}
    assert lint_eagle3(full, shared) == []  # full vocabulary, target's embeddings and lm_head: as vLLM shares them
    assert any(
        "must be left out when draft_vocab_size equals" in p
        for p in lint_eagle3(full, {**shared, "d2t": tensors["d2t"]})
    )
    with pytest.raises(HeadsError, match="fc.weight has shape"):
        from heads.formats.speculators import save_speculators

        broken = Eagle3Drafter(drafter.arch)
        broken.fc = torch.nn.Linear(2 * drafter.arch.target_hidden_size, drafter.arch.hidden_size, bias=False)
        save_speculators(broken, "/nonexistent/never-written", {"name_or_path": "t"}, 3)


def test_shallow_targets_need_explicit_layer_ids(target):
    vocab, _ = build_draft_vocab(torch.ones(target.config.vocab_size), 50)
    with pytest.raises(HeadsError, match="set drafter.layer_ids explicitly"):
        Eagle3Drafter.from_target(Eagle3Config(), target, vocab)  # 2-layer target: [2, 1, -1]
    with pytest.raises(HeadsError, match=r"must be ascending.*use \[0, 1, 2\]"):
        Eagle3Drafter.from_target(Eagle3Config(layer_ids=[1, 0, 2]), target, vocab)


def test_training_time_test_memory_grows_linearly_in_steps(drafter, target):
    from heads.memory import saved_for_backward_bytes

    H, T = target.config.hidden_size, 96
    features, ids = torch.randn(2, T, 3 * H), torch.randint(0, target.config.vocab_size, (2, T))
    drafter.train()
    try:
        saved = {
            n: saved_for_backward_bytes(lambda n=n: drafter(features, ids, torch.ones_like(ids), n)) for n in (1, 4, 7)
        }
    finally:
        drafter.eval()
    first, second = saved[4] - saved[1], saved[7] - saved[4]
    assert first > 0 and 0.9 <= second / first <= 1.2  # a constant cost per step, not one growing with n


def test_eagle1_training_pass_equals_step_by_step_decoding(target, prompt_ids):
    from distill.features.capture import final_hidden_states
    from heads.eagle1 import Eagle1Drafter

    torch.manual_seed(0)
    drafter = Eagle1Drafter.from_target(Eagle1Config(), target).eval()
    ids = torch.tensor([prompt_ids[2][:20]])
    features, logits = final_hidden_states(target, ids)
    with torch.no_grad():
        predicted = drafter(features, ids, torch.ones_like(ids))  # (1, T, H): entry t estimates f_{t+1}
        cache = drafter.new_cache(1, ids.device)
        out = drafter.decode(
            cache, features[:, :12], ids[:, 1:13], torch.arange(12)[None], torch.ones(1, 12, dtype=torch.bool)
        )
        torch.testing.assert_close(out, predicted[:, :12], rtol=1e-4, atol=1e-4)
        # Scored by the target's own lm_head: the target's features give the target's logits.
        torch.testing.assert_close(drafter.logits(features), logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("train_lm_head", [True, False])
def test_a_frozen_lm_head_keeps_the_targets_rows_through_training(target, prompt_ids, train_lm_head):
    """drafter.train_lm_head=false (speculators' choice): the optimizer never moves the target's rows; the default
    trains them like every other weight."""
    vocab, _ = build_draft_vocab(torch.arange(target.config.vocab_size).flip(0), 300)
    torch.manual_seed(0)
    cfg = Eagle3Config(layer_ids=IDS, num_attention_heads=2, num_key_value_heads=1, train_lm_head=train_lm_head)
    drafter = Eagle3Drafter.from_target(cfg, target, vocab)
    rows = target.get_output_embeddings().weight[vocab.draft_to_target].detach().float()
    optimizer = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.tensor([prompt_ids[1][:24]])
    mask = torch.ones_like(ids)
    features, _ = layer_features(target, ids, mask, IDS)
    for _ in range(2):
        sum(logits.logsumexp(-1).mean() for logits in drafter.ttt_logits(features, ids, mask, steps=2)).backward()
        optimizer.step(), optimizer.zero_grad()
    assert torch.equal(drafter.lm_head.weight, rows) != train_lm_head
