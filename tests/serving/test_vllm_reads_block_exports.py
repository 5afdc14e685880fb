"""The block families' exports (DFlash, DSpark, DFlash2) read by vLLM 0.32's own config code, field by field: the
architecture its registry maps to the class we reimplement, the layer ids its aux-layer resolution returns, the
noise id its parallel-drafting lookup returns, the attention its causality rule picks, the DFlash2 candidate head its
runner selects on. vLLM's CPU build cannot *serve* DSpark and DFlash2 (its V2 runner needs Triton), so this, the
linter, and llama.cpp serving both are what a CPU machine can check; scripts/gpu_check.py --serve vllm serves them."""

import json
from types import SimpleNamespace

import pytest
import torch

from heads.config import DFlash2Config, DFlashConfig, DSparkConfig
from heads.dflash import DFlashDrafter
from heads.dflash2 import DFlash2Drafter
from heads.dspark import DSparkDrafter
from tests.exporting import export

pytestmark = pytest.mark.needs_vllm  # vLLM's own config code, imported (no engine starts)
MASK = 3
EXPECTED = {  # family → (architecture, vLLM module, class)
    "dflash": ("DFlashDraftModel", "qwen3_dflash", "DFlashQwen3ForCausalLM"),
    "dspark": ("Qwen3DSparkModel", "qwen3_dspark", "Qwen3DSparkForCausalLM"),
    "dflash2": ("DFlash2DraftModel", "qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),
}


@pytest.fixture(scope="module")
def vllm_code():
    pytest.importorskip("vllm", reason="vLLM is not installed")
    from vllm.model_executor.models import qwen3_dflash, registry
    from vllm.v1.worker.gpu.spec_decode import utils
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils

    return SimpleNamespace(qwen3_dflash=qwen3_dflash, registry=registry, utils=utils, eagle3_utils=eagle3_utils)


@pytest.fixture(scope="module")
def configs(tmp_path_factory, target):
    torch.manual_seed(0)
    drafters = {
        "dflash": DFlashDrafter.from_target(DFlashConfig(layer_ids=[1, 2], num_hidden_layers=2), target, MASK),
        "dspark": DSparkDrafter.from_target(
            DSparkConfig(layer_ids=[1, 2], num_hidden_layers=2, markov_rank=8), target, MASK
        ),
        "dflash2": DFlash2Drafter.from_target(
            DFlash2Config(layer_ids=[1, 2], num_hidden_layers=2, conv_group_size=8, selector_rank=8), target, MASK
        ),
    }
    root = tmp_path_factory.mktemp("vllm_reads")
    return {k: json.loads((export(d, root / k) / "config.json").read_text()) for k, d in drafters.items()}


def _hf(config: dict):
    """The draft's hf_config as vLLM loads it: a transformers Qwen3Config carrying the extra keys."""
    from transformers import Qwen3Config

    return Qwen3Config.from_dict(config)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_vllm_reads_each_block_export_as_trained(kind, configs, vllm_code):
    config = configs[kind]
    architecture, module, cls = EXPECTED[kind]
    assert config["architectures"] == [architecture]
    assert vllm_code.registry._SPECULATIVE_DECODING_MODELS[architecture] == (module, cls)
    hf = _hf(config)
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf))
    assert vllm_code.eagle3_utils.get_eagle3_aux_layers_from_config(spec) == (1, 2)  # our layer ids
    # a reader without eagle_aux_hidden_state_layer_ids (DeepSpec, llama.cpp) gets the same layers from the rest
    fallback = {k: v for k, v in config.items() if k != "eagle_aux_hidden_state_layer_ids"}
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(fallback)))
    assert vllm_code.eagle3_utils.get_eagle3_aux_layers_from_config(spec) == (1, 2)
    assert vllm_code.utils.get_parallel_drafting_token_id(hf) == MASK
    assert not any(vllm_code.qwen3_dflash._dflash_layer_causal(hf, i) for i in range(hf.num_hidden_layers))
    if kind == "dspark":  # DSparkSpeculator: top-level, default true; DFlashSpeculator: dflash_config's, must be false
        assert hf.sample_from_anchor is True
    else:
        assert not (hf.dflash_config or {}).get("sample_from_anchor", False)


def test_vllm_selects_dflash2s_candidate_head_and_not_dflashs(configs, vllm_code):
    from vllm.config.vllm import VllmConfig

    def candidate(kind):
        draft = SimpleNamespace(architectures=configs[kind]["architectures"])
        fake = SimpleNamespace(speculative_config=SimpleNamespace(method="dflash", draft_model_config=draft))
        return VllmConfig._is_dflash_candidate_draft(fake)

    assert candidate("dflash2") and not candidate("dflash")
