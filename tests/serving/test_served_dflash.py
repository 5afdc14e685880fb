"""DFlash served by vLLM as published: its counters and outputs must agree with our engine's.

The two-layer case covers vLLM 0.32's CPU k_norm bug (heads/formats/dflash_vllm_cpu.py): its
layers get deliberately different k_norm weights, so serving them with layer 0's weights for
every layer — what the unpatched CPU build does — would move the served τ away from ours.
"""

import os

import pytest
import torch

from heads.formats.fingerprint import served_files_hash
from tests.exporting import export
from tests.serving.settings import SERVED
from tests.serving.test_served_check import _serve

needs_vllm = pytest.mark.needs_vllm  # registered in pyproject.toml
CFG = SERVED


@pytest.fixture(scope="module")
def dflash_exports(tmp_path_factory, target):
    from tests.eval.dflash_fit import fit_dflash

    root = tmp_path_factory.mktemp("dflash")
    one = fit_dflash(target, layers=1)
    two = fit_dflash(target, layers=2)
    with torch.no_grad():  # make layer 1's context keys depend on its own k_norm
        two.layers[1].self_attn.k_norm.weight.mul_(3.0)
    return {1: export(one, root / "one"), 2: export(two, root / "two")}


@needs_vllm
@pytest.mark.parametrize("layers", [1, 2])
def test_vllm_serves_dflash_as_our_engine_runs_it(layers, dflash_exports, target, tokenizer, micro_world, prompt_ids):
    report = _serve(target, tokenizer, micro_world, dflash_exports[layers], prompt_ids, CFG)
    served = report["served"]
    assert served["method"] == "dflash" and served["equal_prompts"] == len(prompt_ids)
    assert served["verdict"] == "ok", served["reason"]
    ours = 1 + sum(report["per_position_acceptance"])
    assert 1.0 < served["tau"] and abs(served["tau"] - ours) <= 0.05 * ours, (served["tau"], ours)
    assert served["files_sha256"] == served_files_hash(dflash_exports[layers])
    print(f"dflash {layers} layer(s): served τ {served['tau']:.3f}, ours {ours:.3f}")


@needs_vllm
def test_the_cpu_patch_normalises_each_layers_context_keys_with_its_own_k_norm():
    """vLLM's grouped CPU rms_norm uses layer 0's weights for every layer; the patch does not."""
    from types import SimpleNamespace

    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    from heads.formats.dflash_vllm_cpu import _per_layer_k_norm

    torch.manual_seed(0)
    model = SimpleNamespace(_k_norm_weights=torch.stack([torch.ones(32), torch.full((32,), 2.0)]), _rms_norm_eps=1e-6)
    all_k = torch.randn(2, 5, 1, 32)  # (layers, context, kv heads, head_dim)
    reference = torch.stack(
        [torch.nn.functional.rms_norm(all_k[i], (32,), model._k_norm_weights[i], 1e-6) for i in (0, 1)]
    )
    patched = _per_layer_k_norm(model, all_k)
    assert torch.allclose(patched, reference, atol=1e-5)
    if not torch.cuda.is_available():  # the bug this works around (VLLM-FORMATS.md §3); fixed upstream → drop the patch
        vllm_cpu = DFlashQwen3Model._normalize_context_k(model, all_k)
        assert torch.allclose(vllm_cpu[0], reference[0], atol=1e-5)
        assert not torch.allclose(vllm_cpu[1], reference[1], atol=1e-2)


@needs_vllm
def test_the_vllm_plugin_patches_dflash_only_while_asked(monkeypatch, tmp_path):
    """The entry point vLLM loads once per process normalises per layer only while DRAFTHUB_DFLASH_CPU_K_NORM=1,
    which the served check sets for multi-layer exports on CPU: read at each call, so an engine built after the
    plugin loaded (vLLM's in-process engine core) follows the variable too; loading it twice wraps once."""
    pytest.importorskip("vllm")
    from importlib.metadata import entry_points
    from types import SimpleNamespace

    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    from heads.formats.dflash_vllm_cpu import ENV, _per_layer_k_norm, register, served_patch

    assert "heads.formats.dflash_vllm_cpu:register" in {e.value for e in entry_points(group="vllm.general_plugins")}
    original = DFlashQwen3Model._normalize_context_k
    monkeypatch.setattr(DFlashQwen3Model, "_normalize_context_k", original)  # restored after the test
    monkeypatch.delenv(ENV, raising=False)
    register()
    if torch.cuda.is_available():
        assert DFlashQwen3Model._normalize_context_k is original
        return
    wrapped = DFlashQwen3Model._normalize_context_k
    register()  # what a second engine in the same process does
    assert DFlashQwen3Model._normalize_context_k is wrapped
    torch.manual_seed(0)
    model = SimpleNamespace(_k_norm_weights=torch.stack([torch.ones(32), torch.full((32,), 2.0)]), _rms_norm_eps=1e-6)
    all_k = torch.randn(2, 5, 1, 32)
    assert torch.equal(wrapped(model, all_k), original(model, all_k))  # unset: vLLM's own method
    two_layers = tmp_path / "two"
    two_layers.mkdir()
    (two_layers / "config.json").write_text('{"num_hidden_layers": 2}')
    with served_patch(two_layers):
        assert torch.equal(wrapped(model, all_k), _per_layer_k_norm(model, all_k))
    assert ENV not in os.environ and torch.equal(wrapped(model, all_k), original(model, all_k))
