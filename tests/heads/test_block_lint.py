"""The block families' linter (DFlash, DFlash2, DSpark): every config an engine would serve silently wrong is
refused by name when the export is read, and nothing of the kind is ever written."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from heads.config import DFlash2Config, DFlashConfig, DSparkConfig
from heads.dflash import DFlashDrafter
from heads.dflash2 import DFlash2Drafter
from heads.dspark import DSparkDrafter
from heads.errors import HeadsError
from heads.families import FAMILIES
from heads.families.block import write_block
from tests.exporting import export

MASK = 3
DRAFTERS = {
    "dflash": lambda target: DFlashDrafter.from_target(DFlashConfig(layer_ids=[1, 2], block_size=4), target, MASK),
    "dflash2": lambda target: DFlash2Drafter.from_target(
        DFlash2Config(layer_ids=[1, 2], block_size=4, conv_group_size=8, selector_rank=8), target, MASK
    ),
    "dspark": lambda target: DSparkDrafter.from_target(
        DSparkConfig(layer_ids=[1, 2], block_size=4, markov_rank=8), target, MASK
    ),
}


def _set(config, key, value):
    """Set `key` ("a.b" reaches into a dict); value None deletes it."""
    *outer, last = key.split(".")
    node = config
    for k in outer:
        node = node.setdefault(k, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


def _layout_flip(kind):
    return ("sample_from_anchor", False) if kind == "dspark" else ("dflash_config.sample_from_anchor", True)


def _ids_off_by_one(kind):  # our capture ids written where engines read 0-based layer outputs
    return ("target_layer_ids", [1, 2]) if kind == "dspark" else ("dflash_config.target_layer_ids", [1, 2])


CONFIG_EDITS = {
    "layout flag": (_layout_flip, r"sample_from_anchor.*one position off"),
    "layer ids off by one": (_ids_off_by_one, r"off by one: they are 0-based layer outputs"),
    "causal block": (lambda kind: ("is_causal", True), r"causal attention .*trained bidirectional"),
    "sliding layer": (lambda kind: ("layer_types", ["sliding_attention"]), r"causal attention"),
    "neox": (lambda kind: ("is_neox_style", False), r"is_neox_style=false"),
    "block of one": (lambda kind: ("block_size", 0), r"block_size=0, but a \w+ block is the anchor token and at least"),
    "rope base": (lambda kind: ("rope_parameters", {"rope_type": "default"}), None),
    "second mask id": (
        lambda kind: ("dflash_config.mask_token_id" if kind == "dspark" else "mask_token_id", 7),
        r"mask token ids \[3, 7\]",
    ),
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory, target):
    root = tmp_path_factory.mktemp("block_lint")
    torch.manual_seed(0)
    return {kind: export(make(target), root / kind) for kind, make in DRAFTERS.items()}


def _edited(exports, kind, tmp_path, edit_config=None, edit_tensors=None):
    out = tmp_path / kind
    out.mkdir()
    config = json.loads((exports[kind] / "config.json").read_text())
    tensors = load_file(exports[kind] / "model.safetensors")
    if edit_config:
        edit_config(config)
    if edit_tensors:
        edit_tensors(tensors)
    (out / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
@pytest.mark.parametrize("problem", sorted(CONFIG_EDITS))
def test_a_silently_wrong_config_is_refused_by_name(kind, problem, exports, tmp_path):
    change, message = CONFIG_EDITS[problem]
    key, value = change(kind)
    if problem == "rope base":
        message = r"no rope_theta: vLLM's DFlash backbone defaults it to 1e6"

        def edit(config):
            config.pop("rope_theta")
            config["rope_parameters"] = {"rope_type": "default"}
    else:

        def edit(config):
            _set(config, key, value)

    FAMILIES[kind].lint(exports[kind])  # the export as written is clean
    bad = _edited(exports, kind, tmp_path, edit_config=edit)
    with pytest.raises(HeadsError, match=message) as e:
        FAMILIES[kind].lint(bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
def test_missing_norms_are_refused_and_aliased_names_are_named(kind, exports, tmp_path):
    def alias(tensors):
        tensors["encoder.output_norm_enc.weight"] = tensors.pop("hidden_norm.weight")

    bad = _edited(exports, kind, tmp_path, edit_tensors=alias)
    with pytest.raises(HeadsError, match=r"missing norm tensors \['hidden_norm.weight'\].*rename"):
        FAMILIES[kind].lint(bad)


@pytest.mark.parametrize(
    ("kind", "key", "value", "message"),
    [
        ("dspark", "logit_scale", 2.0, r"logit_scale=2.0: vLLM scales the logits and the Markov bias"),
        ("dspark", "markov_head_type", "gated", r"markov_head_type='gated'"),
        ("dflash2", "dflash_config.output_multiplier", 0.5, r"output_multiplier=0.5"),
        ("dflash2", "dflash_config.final_logit_softcapping", 30.0, r"final_logit_softcapping is set"),
    ],
)
def test_a_familys_own_silent_fields_are_refused(kind, key, value, message, exports, tmp_path):
    bad = _edited(exports, kind, tmp_path, edit_config=lambda config: _set(config, key, value))
    with pytest.raises(HeadsError, match=message):
        FAMILIES[kind].lint(bad)


def test_nothing_silently_wrong_is_written(tmp_path, target):
    drafter = DRAFTERS["dspark"](target)
    from heads.families.dspark import dspark_config

    config = dspark_config(drafter.arch) | {"sample_from_anchor": False}
    with pytest.raises(HeadsError, match=r"refusing to write a block drafter export that would not serve"):
        write_block(tmp_path, config, drafter, anchor_first=True)
    assert not (tmp_path / "config.json").exists()
