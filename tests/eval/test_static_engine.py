"""The static-shape engine path: its cache rule against a fresh recompute, compiled decoding equal to the
target's own, and the rule that picks a path."""

import random

import pytest
import torch

from eval.errors import EvalError
from eval.proposer import Proposer
from eval.proposers.draft_lm import DraftLMProposer
from eval.proposers.ngram import NgramProposer
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate, speculative_generate
from eval.static_engine import DYNAMIC, PAD_WIDTHS, Engine, StaticModel, StaticSlotCache, choose_engine, pad_table
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


@torch.no_grad()
def test_rejected_and_padded_slots_are_rewritten_before_they_are_read(target, prompt_ids):
    """Blocks of random widths (padded up to 4 or 7), a random prefix kept each time, and rollbacks: every
    logit equals a fresh forward over the verified tokens plus the block."""
    static = StaticModel(target, max_len=160, widths=(1, 4, 7), compile=False)  # the rule is the cache's
    cache = StaticSlotCache(static, torch.device("cpu"))
    rng = random.Random(0)
    verified = list(prompt_ids[0][:30])
    cache.feed(target, [verified])
    padded = kept_short = 0
    for _ in range(14):
        width = rng.randint(1, 7)
        block = [rng.randrange(5, target.config.vocab_size) for _ in range(width)]
        logits = cache.forward(target, torch.tensor([block])).logits[0]  # (width, V)
        fresh = target(input_ids=torch.tensor([verified + block])).logits[0, len(verified) :]
        torch.testing.assert_close(logits, fresh, atol=1e-4, rtol=1e-4)
        keep = rng.randint(0, width)
        cache.keep_last([list(range(keep))], width)
        verified += block[:keep]
        padded += static.width_for(width) > width
        kept_short += keep < width
        if rng.random() < 0.2:  # a drafter's rollback
            cut = rng.randint(len(verified) - 3, len(verified))
            cache.rollback([cut])
            verified = verified[:cut]
        assert cache.lengths() == [len(verified)]
    assert padded and kept_short  # both kinds of stale slot were left behind and then overwritten


@torch.no_grad()
def test_a_prompts_forward_computes_only_the_logits_it_is_asked_for(target, prompt_ids):
    """A prompt runs eagerly at its own length; the LM head over all its positions (49k-token vocabularies) is
    wasted work both the baseline and the speculative decode paid in every prefill: the last logits alone, equal."""
    static = StaticModel(target, max_len=160, widths=(1, 4), compile=False)
    cache = StaticSlotCache(static, torch.device("cpu"))
    ids = torch.tensor([prompt_ids[0][:30]])
    full = static.run(ids, 0).logits
    last = cache.forward(target, ids, logits_to_keep=1).logits
    assert full.shape[1] == 30 and last.shape[1] == 1 and cache.lengths() == [30]
    torch.testing.assert_close(last[0, -1], full[0, -1])
    assert static.run(ids, 0, logits_to_keep=1).logits.shape[1] == 1  # computed so, not cut afterwards


def test_the_cache_lengths_are_set_in_inference_mode_where_transformers_allocates_them_so(target, prompt_ids):
    """transformers 5.17 allocates StaticCache's length counters as inference tensors (seen on an H100): setting
    them outside inference mode raised, so the static path failed on the first GPU eval."""
    static = StaticModel(target, max_len=64, widths=(1, 4), compile=False)
    for layer in static.cache.layers:
        if torch.is_tensor(getattr(layer, "cumulative_length", None)):
            with torch.inference_mode():
                layer.cumulative_length = layer.cumulative_length.clone()  # an inference tensor, as 5.17 makes it
    ids = torch.tensor([prompt_ids[0][:4]])
    first = static.run(ids, 0).logits
    again = static.run(ids, 0).logits  # a second block at the same place: the lengths are set back, in place
    torch.testing.assert_close(first, again)


@pytest.mark.slow  # torch.compile: ~90 s on 2 cores, a few with a warm inductor cache
def test_compiled_decoding_equals_the_dynamic_path_token_for_token(target, weak_draft, tokenizer, prompt_ids):
    greedy, eos, vocab = SamplingParams(), {tokenizer.eos_token_id}, len(tokenizer)
    prompts = prompt_ids[:3]
    proposer = DraftLMProposer(weak_draft, vocab)
    engine = choose_engine(
        "static", target, proposer, tree=None, batch_size=1, max_len=max(map(len, prompts)) + 48, widths=(1, 4)
    )
    engine.static_model(target)
    proposer.use_engine(engine)
    assert engine.precompile() > 0 and engine.describe()["path"] == "static-compiled"
    partial = False
    for ids in prompts:
        plain = autoregressive_generate(target, [ids], 24, greedy, eos_ids=eos, vocab_size=vocab)
        compiled = autoregressive_generate(target, [ids], 24, greedy, eos_ids=eos, vocab_size=vocab, engine=engine)
        spec, stats = speculative_generate(
            target, proposer, [ids], 24, 3, greedy, eos_ids=eos, vocab_size=vocab, engine=engine
        )
        assert compiled == spec == plain
        partial |= any(c < 3 for c in stats.accept_counts)
    assert partial  # rejected drafts: their stale slots were overwritten
    assert engine.describe()["compile_seconds"] > 0


@pytest.mark.slow  # torch.compile of the target twice (with and without its hidden states): ~2 min on 2 cores
def test_a_drafter_reading_the_targets_features_decodes_compiled_as_on_the_dynamic_path(
    micro_world, tokenizer, prompt_ids, greedy_reference
):
    """DFlash on the static path, reading layer id N too: the target's compiled graphs return its hidden states and
    the last layer's output before the norm (a hook traced into the graph), every token equals the dynamic path's
    and the target's own greedy output; plain decoding runs the graphs without them."""
    from transformers import AutoModelForCausalLM

    from eval.proposers.dflash import DFlashProposer
    from tests.eval.dflash_fit import fit_dflash

    # its own copy of the target: a second static engine on a model another test compiled in this process read that
    # engine's cache (transformers marks StaticCache tensors static, inductor's freezing folds them); eval builds one.
    # Fitting the drafter runs the target for its hidden states, which installs transformers' capturing hooks; the
    # engine gets a fresh copy, as eval's freshly loaded target (the first such call, compiled, failed on a GPU).
    fitted = AutoModelForCausalLM.from_pretrained(micro_world.target_dir).eval()
    target = AutoModelForCausalLM.from_pretrained(micro_world.target_dir).eval()
    assert not getattr(target, "_output_capturing_hooks_installed", False)

    greedy, eos, vocab = SamplingParams(), {tokenizer.eos_token_id}, len(tokenizer)
    proposer = DFlashProposer(fit_dflash(fitted, layer_ids=(1, 2)), vocab)  # 2 = N: the hook traced into the graph
    prompts = prompt_ids[:3]
    engine = choose_engine(
        "static", target, proposer, tree=None, batch_size=1, max_len=max(map(len, prompts)) + 48, widths=(1, 4)
    )
    static = engine.static_model(target, features=proposer.target_layer_ids)
    proposer.use_engine(engine)
    engine.precompile()
    accepted = []
    for ids, reference in zip(prompts, greedy_reference):
        dynamic, _ = speculative_generate(target, proposer, [ids], 40, 3, greedy, eos_ids=eos, vocab_size=vocab)
        spec, stats = speculative_generate(
            target, proposer, [ids], 40, 3, greedy, eos_ids=eos, vocab_size=vocab, engine=engine
        )
        plain = autoregressive_generate(target, [ids], 40, greedy, eos_ids=eos, vocab_size=vocab, engine=engine)
        assert spec == dynamic == plain == [reference]
        accepted += stats.accept_counts
    assert any(c > 0 for c in accepted) and any(c < 3 for c in accepted)  # the drafter was right and wrong
    ids = torch.tensor([prompt_ids[0][:4]])
    with_states = static.run(ids, 0, hidden_states=True)
    fresh = target(input_ids=ids, output_hidden_states=True)
    for mine, theirs in zip(with_states.hidden_states, fresh.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
    from heads.target_features import last_layer_output

    with last_layer_output(target, (2,)) as final:
        target(input_ids=ids)
    torch.testing.assert_close(with_states.last_layer, final[0], atol=1e-4, rtol=1e-4)  # before the norm


class _ReadsTheLastLayer(Proposer):
    tree_depth = None

    def __init__(self, target):
        self.target_layer_ids = (1, target.config.num_hidden_layers)


def test_the_engine_choice_names_its_path_and_refuses_what_static_cannot_run(target, weak_draft, tokenizer):
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    kw = dict(batch_size=1, max_len=64, widths=(1, 4))
    auto = choose_engine("auto", target, proposer, tree=None, **kw)
    assert auto.probe and auto.reason == "auto on a CPU: measured"  # no GPU here: `settle` times both paths
    assert choose_engine("static", target, proposer, tree=None, **kw).name == "static"
    tree = choose_engine("auto", target, proposer, tree=[2, 2], **kw)
    assert tree.name == "dynamic" and tree.reason == "the static path does not cover token trees"
    with pytest.raises(EvalError, match=r"eval.engine=static does not cover token trees; use eval.engine=auto"):
        choose_engine("static", target, proposer, tree=[2, 2], **kw)
    several = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=len(tokenizer), num_matches=2)
    assert choose_engine("auto", target, several, tree=None, **kw).reason.endswith("token trees")  # its own trees
    one = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=len(tokenizer))
    assert choose_engine("static", target, one, tree=None, **kw).name == "static"  # vLLM's chains
    with pytest.raises(EvalError, match="batches of 2 rows"):
        choose_engine("static", target, proposer, tree=None, **{**kw, "batch_size": 2})
    assert choose_engine("static", target, _ReadsTheLastLayer(target), tree=None, **kw).name == "static"  # layer N
    with pytest.raises(EvalError, match=r"eval.engine='fast'; use one of \['auto', 'static', 'dynamic'\]"):
        choose_engine("fast", target, proposer, tree=None, **kw)


@pytest.mark.slow  # torch.compile of width 1: ~30 s on 2 cores, seconds with a warm inductor cache
def test_auto_on_a_cpu_keeps_the_path_a_plain_step_measures_faster(micro_world, weak_draft, tokenizer):
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(micro_world.target_dir).eval()  # its own copy: a fresh cache
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    kw = dict(tree=None, batch_size=1, max_len=128, widths=(1, 4))
    tiny = choose_engine("auto", target, proposer, **kw).settle(target, decode_tokens=100)
    assert tiny.name == "dynamic" and "cannot pay back within this eval's 100 decoded tokens" in tiny.reason
    assert tiny.reason.endswith("widths not timed (too few tokens to repay it)") and not tiny.verify_widths
    short = choose_engine("auto", target, proposer, **kw).settle(target, decode_tokens=2000)
    assert short.name == "dynamic" and "within this eval's 2000 decoded tokens" in short.reason
    width_ms = {int(w): t for w, t in short.describe()["probe"]["width_ms"].items()}  # every block width, timed
    assert sorted(width_ms) == list(range(1, PAD_WIDTHS + 1)) and short.verify_widths == pad_table(width_ms)
    settled = choose_engine("auto", target, proposer, **kw).settle(target, decode_tokens=10**9)  # compiling pays
    timed = settled.describe()["probe"]
    assert settled.static == (timed["compiled_ms"] <= 0.9 * timed["eager_ms"]), timed
    assert f"{timed['compiled_ms']:.1f} ms compiled" in settled.reason and settled.describe()["compile_seconds"] > 0
    assert not settled.probe and settled.settle(target) is settled  # measured once
    assert (
        choose_engine("dynamic", target, proposer, tree=None, batch_size=1, max_len=64, widths=(1,)).settle(target).name
        == "dynamic"
    )


def test_a_width_pads_up_only_to_a_wider_one_measured_faster():
    times = {1: 10.0, 2: 17.0, 3: 21.0, 4: 14.0, 5: 15.0}  # SmolLM2's shape on 2 AVX-512 cores: 2-3 tokens slow
    assert pad_table(times) == {2: 4, 3: 4}
    assert pad_table({1: 10.0, 2: 10.5, 3: 9.8}) == {}  # 9.8 ms is not 10 % under 10.5: noise, no padding


def _widths_seen(target) -> tuple[list[int], object]:
    seen: list[int] = []
    hook = target.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True)
    return seen, hook


@pytest.mark.parametrize("drafter", ["ngram", "draft_lm"])
def test_padded_verification_decodes_the_same_tokens_with_the_same_counts(
    target, weak_draft, tokenizer, prompt_ids, drafter
):
    """Blocks of 3 tokens (γ 2) run as 4, for the whole batch (ngram: rows drafting 0–2 tokens) or one row: the
    outputs, what was drafted and what was accepted are the unpadded run's, and the target saw the wider blocks."""
    vocab, eos, gamma = len(tokenizer), {tokenizer.eos_token_id}, 2

    def proposer():
        if drafter == "ngram":
            return NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=vocab)
        return DraftLMProposer(weak_draft, vocab)

    padded = Engine("dynamic", "test", verify_widths={2: 4, 3: 4})
    runs = {}
    for name, engine in (("plain", DYNAMIC), ("padded", padded)):
        seen, hook = _widths_seen(target)
        try:
            out, stats = speculative_generate(
                target, proposer(), prompt_ids, 40, gamma, GREEDY, eos_ids=eos, vocab_size=vocab, engine=engine
            )
        finally:
            hook.remove()
        runs[name] = (out, stats.accept_counts, stats.draft_counts, stats.proposed_tokens, seen)
    assert runs["padded"][:4] == runs["plain"][:4]
    assert {2, 3} & set(runs["plain"][4]) and not {2, 3} & set(runs["padded"][4]) and 4 in runs["padded"][4]


def test_padded_verification_samples_the_targets_distribution(target, weak_draft, tokenizer, prompt_ids):
    padded = Engine("dynamic", "test", verify_widths={2: 5, 3: 5})  # γ 2: a block of 3 runs as 5
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    assert_first_tokens_follow_the_target(target, proposer, prompt_ids[1], len(tokenizer), engine=padded)
