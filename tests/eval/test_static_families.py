"""Every family's chains on the static path (pre-allocated cache, fixed block widths): greedy output equal to the
target's own, and sampled output equal to the dynamic path's under the same seed (so rejection sampling stays
exact there). The graphs run eagerly here (compile=False: the cache and padding rules are what differ between the
paths; tests/eval/test_static_engine.py compiles a draft LM and a feature-reading drafter for real)."""

import pytest
import torch

from eval.proposers.dflash import DFlashProposer
from eval.proposers.dflash2 import DFlash2Proposer
from eval.proposers.draft_lm import DraftLMProposer
from eval.proposers.dspark import DSparkProposer
from eval.proposers.eagle3 import EagleProposer
from eval.proposers.medusa import MedusaProposer
from eval.proposers.ngram import NgramProposer
from eval.proposers.pard import PardProposer
from eval.proposers.peagle import PEagleProposer
from eval.proposers.retrieval import RetrievalProposer
from eval.proposers.suffix import SuffixProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from eval.static_engine import DYNAMIC, Engine, choose_engine
from heads.config import MedusaConfig
from heads.families import FAMILIES
from heads.layer_skip import LayerSkipDrafter
from heads.retrieval import RetrievalDrafter

pytestmark = pytest.mark.slow  # fitting seven drafters, three decodes per path and family: minutes on 2 cores
GREEDY, SAMPLED, GAMMA, NEW = SamplingParams(), SamplingParams(temperature=1.0, top_k=40), 3, 24


def _proposers(target, weak_draft, greedy_reference) -> dict:
    """Each family's proposer on the micro target (fitted for a few steps where it has weights)."""
    from tests.eval.dflash_fit import fit_dflash, fit_dflash2, fit_dspark
    from tests.eval.eagle_fit import fit_eagle, fit_eagle1
    from tests.eval.medusa_fit import fit_heads
    from tests.eval.peagle_fit import fit_peagle

    vocab = target.config.vocab_size
    store = RetrievalDrafter(answers=tuple(tuple(ref[:20]) for ref in greedy_reference[:3]))
    return {
        "draft_lm": DraftLMProposer(target, vocab),  # every greedy draft accepted; sampled ones rejected at times
        "layer_skip": DraftLMProposer(LayerSkipDrafter.from_target(target, [1]).model, vocab),
        "pard": PardProposer(target, vocab, 4, GAMMA),  # id 4: a special token the prompts never use
        "medusa": MedusaProposer(fit_heads(target, MedusaConfig(num_heads=GAMMA)), vocab),
        "eagle3": EagleProposer(fit_eagle(target), vocab),  # reads layer id N, the last layer before the norm
        "eagle1": EagleProposer(fit_eagle1(target), vocab),
        "peagle": PEagleProposer(fit_peagle(target), vocab),
        "dflash": DFlashProposer(fit_dflash(target, layer_ids=(1,)), vocab),
        "dspark": DSparkProposer(fit_dspark(target, layer_ids=(1,)), vocab),
        "dflash2": DFlash2Proposer(fit_dflash2(target, layer_ids=(1,)), vocab),
        "ngram": NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=vocab),
        "suffix": SuffixProposer(vocab_size=vocab),
        "retrieval": RetrievalProposer(store, vocab_size=vocab),
    }


@pytest.fixture(scope="module")
def proposers(target, weak_draft, greedy_reference):
    torch.manual_seed(0)
    return _proposers(target, weak_draft, greedy_reference)


def test_every_family_but_lookahead_has_a_static_chain_here(proposers):
    """Lookahead drafts its own tree every step (a window and a pool): the dynamic path's, said so by choose_engine."""
    assert set(proposers) == set(FAMILIES) - {"lookahead"}


def _static(target, proposer, prompts) -> Engine:
    engine = choose_engine(
        "static", target, proposer, tree=None, batch_size=1, max_len=max(map(len, prompts)) + NEW + 2 * (GAMMA + 1),
        widths=(1, 2, GAMMA + 1),
    )  # fmt: skip
    engine.compile = False
    engine.static_model(target, features=proposer.target_layer_ids)  # as eval builds it: layer N traced too
    proposer.use_engine(engine)
    return engine


@pytest.mark.parametrize("kind", sorted(set(FAMILIES) - {"lookahead"}))
def test_each_family_decodes_on_the_static_path_as_on_the_dynamic_one(
    kind, proposers, target, tokenizer, prompt_ids, greedy_reference
):
    proposer, prompts = proposers[kind], prompt_ids[:3]
    engine = _static(target, proposer, prompts)
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    accepted = []
    for ids, reference in zip(prompts, greedy_reference):
        proposer.begin_workload("greedy")
        (out,), stats = speculative_generate(
            target, proposer, [ids], NEW, GAMMA, GREEDY, eos_ids=eos, vocab_size=vocab, engine=engine
        )
        assert out == reference[: len(out)] and len(out) == min(NEW, len(reference)), kind
        accepted += stats.accept_counts
        sampled = {}
        for path, on in (("static", engine), ("dynamic", DYNAMIC)):  # the same seed on both: the same tokens
            proposer.begin_workload(f"sampled {path}")
            proposer.use_engine(on)  # a drafter with its own model cache follows the path
            generator = torch.Generator().manual_seed(7)
            (sampled[path],), _ = speculative_generate(
                target, proposer, [ids], NEW, GAMMA, SAMPLED, eos_ids=eos, vocab_size=vocab, generator=generator,
                engine=on,
            )  # fmt: skip
        proposer.use_engine(engine)
        assert sampled["static"] == sampled["dynamic"], kind
    assert any(a > 0 for a in accepted), f"{kind}: no draft was ever accepted, so the test would prove little"
