import json

import torch
from transformers import AutoModelForCausalLM

from heads.config import DraftLMConfig
from heads.draft_lm import DraftLM
from heads.families import write_provenance
from tests.exporting import export


def test_export_loads_with_automodel_and_works_as_assistant_model(tmp_path, target, tokenizer, prompt_ids):
    torch.manual_seed(0)
    drafter = DraftLM.from_config(
        DraftLMConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2),
        target.config,
        tokenizer,
    )
    provenance = {
        "kind": "draft_lm",
        "model_name": "t",
        "target": {"name_or_path": "toyworld:micro"},
        "recipe": {"recipe_name": "test"},
        "eval": {"tau": 2.0, "alpha": 0.5, "speedup": 1.2, "lossless": True},
    }
    out = export(drafter, tmp_path / "drafter", tokenizer=tokenizer)
    write_provenance(out, provenance)
    assert json.loads((out / "drafthub.json").read_text())["kind"] == "draft_lm"
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers") and "| 2.000 | 0.500 |" in card
    assert (out / "model.safetensors").exists() and not list(tmp_path.glob(".drafter-*"))

    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([prompt_ids[0]])
    torch.testing.assert_close(loaded(ids).logits, drafter(ids).logits)
    kwargs = dict(
        do_sample=False, max_new_tokens=24, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    assisted = target.generate(ids, assistant_model=loaded, **kwargs)
    assert torch.equal(assisted, target.generate(ids, **kwargs))


def test_lora_drafter_exports_merged_weights(tmp_path, target, tokenizer, prompt_ids):
    cfg = DraftLMConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2)
    cfg.lora.enabled = True
    torch.manual_seed(0)
    drafter = DraftLM.from_config(cfg, target.config, tokenizer)
    with torch.no_grad():  # make the adapters non-trivial
        for name, p in drafter.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    drafter.save_pretrained(tmp_path / "d")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "d").eval()
    ids = torch.tensor([prompt_ids[0]])
    torch.testing.assert_close(loaded(ids).logits, drafter(ids).logits, rtol=1e-4, atol=1e-4)
    assert not any("lora" in k for k in loaded.state_dict())


def test_an_export_killed_at_any_point_leaves_a_complete_one_and_the_rerun_is_identical(
    tmp_path, target, tokenizer, monkeypatch
):
    """Killed while writing (the old export stays), or between the two renames of the swap (the old one waits as
    .drafter-old, which the next run puts back): either way the rerun writes the same files."""
    import os

    import pytest

    from heads.formats import staging
    from heads.formats.fingerprint import served_files_hash
    from train.stages.run_dir import clean_debris

    torch.manual_seed(0)
    drafter = DraftLM.from_config(
        DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
        target.config,
        tokenizer,
    )
    out = export(drafter, tmp_path / "drafter", tokenizer=tokenizer)
    before = served_files_hash(out)
    with pytest.raises(KeyboardInterrupt):
        with staging.staged_directory(out) as tmp:
            (tmp / "config.json").write_text("{")  # half written
            raise KeyboardInterrupt
    assert served_files_hash(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["drafter"]
    real_replace, calls = os.replace, []

    def killed_between_renames(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after drafter → .drafter-old, before the new one is renamed in
        real_replace(src, dst)

    monkeypatch.setattr(staging.os, "replace", killed_between_renames)
    with pytest.raises(KeyboardInterrupt):
        export(drafter, out, tokenizer=tokenizer)
    monkeypatch.setattr(staging.os, "replace", real_replace)
    assert not out.exists() and (tmp_path / ".drafter-old").is_dir()
    clean_debris(tmp_path)  # what the next run does first
    assert served_files_hash(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["drafter"]
    assert served_files_hash(export(drafter, out, tokenizer=tokenizer)) == before  # the rerun: identical files
