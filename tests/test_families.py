"""A drafter family is a unit: declared once per layer, in that layer's table, and nowhere else.

These tests walk every registered family through every table, so a family that forgets an entry
fails here, in CI, and not in a user's run; and they check that an unknown kind or a missing
entry stops a run at start-up with one line naming the table and the known kinds.
"""

import dataclasses
import json

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra

from eval.proposers import PROPOSERS
from heads.config import (
    DFlash2Config,
    DFlashConfig,
    DraftLMConfig,
    DSparkConfig,
    Eagle1Config,
    Eagle3Config,
    LayerSkipConfig,
    LookaheadConfig,
    MedusaConfig,
    NgramConfig,
    PardConfig,
    PEagleConfig,
    RetrievalConfig,
    SuffixConfig,
)
from heads.dflash import DFlashDrafter
from heads.dflash2 import DFlash2Drafter
from heads.draft_lm import DraftLM
from heads.dspark import DSparkDrafter
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.errors import HeadsError
from heads.families import CATEGORIES, FAMILIES, SIGNALS, ExportJob, get_family, model_card, read_export
from heads.formats import ENGINE_NAMES
from heads.formats.staging import staged_directory
from heads.layer_skip import LayerSkipDrafter
from heads.medusa import MedusaHeads
from heads.pard import PardDrafter
from heads.peagle import PEagleDrafter
from heads.vocab import build_draft_vocab
from tests.conftest import REPO
from train.config import register_configs
from train.setups import SETUPS
from train.stages.preflight import check_run

register_configs()


def _compose(*overrides):
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose("config", overrides=list(overrides))
    GlobalHydra.instance().clear()
    return cfg


def _toy_recipe_kinds() -> set[str]:
    return {_compose(f"recipe={p.stem}").drafter.kind for p in (REPO / "recipes").glob("toy*.yaml")}


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_every_family_has_every_table_entry_it_needs(kind):
    family = FAMILIES[kind]
    assert family.kind == kind and family.signals in SIGNALS
    assert dataclasses.is_dataclass(family.schema) and family.schema().kind == kind  # the schema names its family
    assert (REPO / "conf" / "drafter" / f"{kind}.yaml").is_file(), f"conf/drafter/{kind}.yaml selects {kind}_schema"
    assert _compose(f"drafter={kind}").drafter.kind == kind
    assert kind in PROPOSERS, "eval/proposers/__init__.py PROPOSERS"
    # Trainable ⇔ a training setup: a training-free family must not carry a dead row either.
    assert (kind in SETUPS) == family.trainable, "train/setups/__init__.py SETUPS"
    engines = [c.engine for c in family.consumers]
    assert len(engines) == len(set(engines)) and set(engines) <= set(ENGINE_NAMES) | {"transformers"}
    assert family.category in CATEGORIES, "the registry's leaderboard filters by it"
    assert family.category != "training-free" or not family.trainable or kind == "layer_skip"  # a search, no weights
    assert kind in _toy_recipe_kinds(), "a toy recipe (recipes/toy*.yaml) that runs the family here"


def test_an_unknown_kind_is_one_line_naming_the_table_and_the_known_kinds():
    with pytest.raises(
        HeadsError, match=r"drafter.kind='nope' has no entry in the family table .*known kinds: \[.*'draft_lm'"
    ):
        get_family("nope")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (PROPOSERS, r"no entry in the proposer table \(eval/proposers/__init__.py PROPOSERS\)"),
        (SETUPS, r"training-setup table"),
    ],
)
def test_a_forgotten_entry_stops_the_run_before_any_work(table, message, monkeypatch):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(_compose("recipe=toy", "target=micro"))
    check_run(cfg)  # the default recipe is complete
    monkeypatch.delitem(table, "draft_lm")
    with pytest.raises(Exception, match=message):
        check_run(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["drafter=medusa", "trainer.policy=on_policy"], "on_policy is not available for medusa drafters: its heads"),
        (["drafter=pard", "trainer.policy=on_policy"], "on_policy is not available for pard drafters: it drafts"),
        (["drafter=medusa", "trainer.loss=al"], r"trainer.loss=al is not implemented for medusa drafters"),
        (
            ["drafter=eagle3", "drafter.layer_ids=[0,1,2]", "trainer.loss=tvd"],
            r"not implemented for eagle3 drafters; use one of \['fkl', 'ce', 'al'\]",
        ),
        (["trainer.policy=offpolicy"], "trainer.policy='offpolicy'"),
        (["trainer.policy=on_policy", "trainer.on_policy_fraction=0"], r"on_policy_fraction=0.0 must be in \(0, 1\]"),
        (["trainer.policy=on_policy", "trainer.loss=ce"], "trainer.loss=ce learns the sampled tokens"),
        (
            [
                "drafter=eagle3",
                "drafter.layer_ids=[0,1,2]",
                "trainer.policy=on_policy",
                "trainer.on_policy_rollout=answers",
            ],
            r"on_policy_rollout='answers' is not available for eagle3 drafters; use one of \['chains'\]",
        ),
        (["data.source=web"], "data.source='web'; use one of"),
    ],
)
def test_a_loss_or_policy_the_family_lacks_is_refused_before_any_work(overrides, message):
    """Never silently ignored: EAGLE-3 used to train its soft cross-entropy whatever trainer.loss said."""
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match=message):
        check_run(OmegaConf.to_object(_compose("recipe=toy", "target=micro", *overrides)))
    for kind in ("draft_lm", "eagle3"):  # the families with an on-policy objective pass
        layers = ["drafter.layer_ids=[0,1,2]"] if kind == "eagle3" else []  # the 2-layer micro target's
        check_run(
            OmegaConf.to_object(
                _compose("recipe=toy", "target=micro", f"drafter={kind}", "trainer.policy=on_policy", *layers)
            )
        )
    answers = ["trainer.policy=on_policy", "trainer.on_policy_rollout=answers"]  # DistillSpec's whole answers
    check_run(OmegaConf.to_object(_compose("recipe=toy", "target=micro", *answers)))


def _small_draft_lm(target, tokenizer, path):
    cfg = DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1)
    DraftLM.from_config(cfg, target.config, tokenizer).save_pretrained(path)


def _small_pard(target, tokenizer, path):
    cfg = PardConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1)
    PardDrafter.from_config(cfg, target.config, tokenizer, pard_token=4).save_pretrained(path)


def _eagle3(target, tokenizer, path):
    vocab, _ = build_draft_vocab(torch.ones(target.config.vocab_size), 64)
    Eagle3Drafter.from_target(Eagle3Config(layer_ids=[0, 1, 2]), target, vocab).save_pretrained(path)


def _peagle(target, tokenizer, path):
    vocab, _ = build_draft_vocab(torch.ones(target.config.vocab_size), 64)
    PEagleDrafter.from_target(PEagleConfig(layer_ids=[0, 1, 2]), target, vocab, 5).save_pretrained(path)


# (micro target, tokenizer, directory) → a fresh native checkpoint of each trainable family
NATIVE = {
    "draft_lm": _small_draft_lm,
    "pard": _small_pard,
    "medusa": lambda target, tokenizer, path: MedusaHeads.from_target(
        MedusaConfig(num_heads=2), target
    ).save_pretrained(path),
    "eagle3": _eagle3,
    "eagle1": lambda target, tokenizer, path: Eagle1Drafter.from_target(Eagle1Config(), target).save_pretrained(path),
    "peagle": _peagle,
    "dflash": lambda target, tokenizer, path: DFlashDrafter.from_target(
        DFlashConfig(layer_ids=[1, 2], num_hidden_layers=2), target, 3
    ).save_pretrained(path),
    "dspark": lambda target, tokenizer, path: DSparkDrafter.from_target(
        DSparkConfig(layer_ids=[1, 2], num_hidden_layers=2, markov_rank=8), target, 3
    ).save_pretrained(path),
    "dflash2": lambda target, tokenizer, path: DFlash2Drafter.from_target(
        DFlash2Config(layer_ids=[1, 2], num_hidden_layers=2, conv_group_size=8, selector_rank=8), target, 3
    ).save_pretrained(path),
    "layer_skip": lambda target, tokenizer, path: LayerSkipDrafter.from_target(target, [1]).save_pretrained(path),
}


def _native(kind, target, tokenizer, path):
    """A fresh native checkpoint of a trainable family for the micro target; None for a training-free one."""
    if not FAMILIES[kind].trainable:
        return None
    torch.manual_seed(0)
    NATIVE[kind](target, tokenizer, path)
    return path


SETTINGS = {
    "draft_lm": DraftLMConfig(),
    "pard": PardConfig(),
    "medusa": MedusaConfig(),
    "eagle3": Eagle3Config(),
    "eagle1": Eagle1Config(),
    "peagle": PEagleConfig(layer_ids=[0, 1, 2]),
    "ngram": NgramConfig(),
    "dflash": DFlashConfig(layer_ids=[1, 2]),
    "dspark": DSparkConfig(layer_ids=[1, 2]),
    "dflash2": DFlash2Config(layer_ids=[1, 2]),
    "layer_skip": LayerSkipConfig(),
    "lookahead": LookaheadConfig(),
    "suffix": SuffixConfig(),
    "retrieval": RetrievalConfig(),
}


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_each_export_is_recognised_as_its_own_family_loads_and_lints(kind, tmp_path, target, tokenizer):
    family = FAMILIES[kind]
    job = ExportJob(
        checkpoint=_native(kind, target, tokenizer, tmp_path / "native"),
        settings=SETTINGS[kind],
        tokenizer=tokenizer,
        verifier={"name_or_path": "toyworld:micro", "architectures": ["LlamaForCausalLM"]},
        num_speculative_tokens=3,
        answers=((5, 6, 7), (8, 9)) if family.from_answers else (),  # the distilled answers the pipeline passes
    )
    assert (job.checkpoint is None) == (not family.trainable)
    with staged_directory(tmp_path / "drafter") as tmp:
        family.export(job, tmp)
    out = tmp_path / "drafter"
    assert read_export(out).family is family  # exactly one family recognises it
    family.lint(out)
    drafter = family.load(out, target)  # raises where unusable; loads back whole
    if isinstance(drafter, torch.nn.Module):  # its weights (a family may reuse another's module: the echo family)
        assert list(drafter.parameters()) and all(torch.isfinite(p).all() for p in drafter.parameters()), kind
    else:  # a training-free drafter: its settings, as this family's
        assert getattr(drafter, "kind", None) == kind, type(drafter).__name__
    for consumer in family.consumers:  # each engine's layout is written where it loads it from
        if consumer.optional:  # written only when asked for (publish.engines): tests/serving/test_llamacpp.py
            assert consumer.subdir is None or not (out / consumer.subdir).exists()
        else:
            assert (out / (consumer.subdir or "") / "config.json").is_file()
        if consumer.checked:
            config = consumer.speculative_config(out, 3)
            assert isinstance(config["method"], str) and config["num_speculative_tokens"] == 3
    if not any(c.engine == "vllm" for c in family.consumers):  # lookahead: the served check refuses it up front
        assert family.not_served("vllm") == f"vLLM does not serve {kind} drafters"
    provenance = {
        "kind": kind,
        "model_name": "t",
        "target": {"name_or_path": "toyworld:micro"},
        "recipe": {"recipe_name": "t"},
        "eval": {"tau": 2.0, "settings": {"num_speculative_tokens": 3}},
        **family.describe(out, {}),
    }
    card = model_card(provenance)
    assert card.startswith(f"---\nlibrary_name: {family.library}") and "## Use it" in card
    for consumer in family.consumers:  # one block per engine that serves it, at the γ the eval measured
        assert consumer.usage("toyworld:micro", family.serving_gamma(3, provenance), provenance) in card


def test_a_directory_no_family_recognises_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "something-else"}')
    with pytest.raises(HeadsError, match=r"recognised by no family; known kinds"):
        read_export(tmp_path)


def test_one_gamma_reaches_users(tmp_path, target, tokenizer):
    """The γ an export carries (EAGLE-3's speculators default), the γ its eval measured and served, every
    snippet of its card and the registry page's usage are one value; the sweep's fastest stands beside it."""
    from heads.families import serving_gamma, usage_text

    family = FAMILIES["eagle3"]
    job = ExportJob(_native("eagle3", target, tokenizer, tmp_path / "native"), SETTINGS["eagle3"], tokenizer, {}, 3)
    with staged_directory(tmp_path / "drafter") as tmp:
        family.export(job, tmp)
    out = tmp_path / "drafter"
    evaluated = {"settings": {"num_speculative_tokens": 3}, "recommended_num_speculative_tokens": 2}
    provenance = {"kind": "eagle3", "model_name": "e", "target": {"name_or_path": "T"}, "eval": evaluated}
    provenance |= family.describe(out, {})
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == serving_gamma(provenance) == 3
    assert family.consumer("vllm").speculative_config(out, serving_gamma(provenance))["num_speculative_tokens"] == 3
    card = model_card(provenance)
    assert '"num_speculative_tokens": 3}' in card and "--speculative-num-steps 3 " in card
    assert '"num_speculative_tokens": 2' not in card and "re-run with `eval.num_speculative_tokens=2`" in card
    assert '"num_speculative_tokens": 3}' in usage_text(provenance, export_dir=str(out))  # the registry page's


def test_every_engine_the_served_check_starts_is_a_consumer_families_list():
    from eval.serving import SERVERS

    for engine, module in SERVERS.items():
        assert module.ENGINE == engine
        assert any(c.engine == engine and c.checked for f in FAMILIES.values() for c in f.consumers)
