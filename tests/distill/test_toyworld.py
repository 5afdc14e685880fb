import json

from transformers import AutoConfig

from distill.toyworld import load_world


def test_micro_world_is_cached_and_complete(micro_world):
    again = load_world("micro")
    assert again.root == micro_world.root  # same key: built once, reused
    info = micro_world.info
    assert info["parameters"] > 0 and info["heldout_loss"] < 6.0  # learnt something (uniform = ln 512 = 6.24)
    cfg = AutoConfig.from_pretrained(micro_world.target_dir)
    assert cfg.hidden_size // cfg.num_attention_heads >= 32  # vLLM's CPU attention needs head_dim >= 32
    for split in ("train", "heldout"):
        rows = [json.loads(line) for line in micro_world.prompts_file(split).read_text().splitlines()]
        assert rows and all(r["messages"][0]["role"] == "user" for r in rows)
    assert not list(micro_world.root.parent.glob(f".{micro_world.root.name}-*"))  # no temp dirs left


def test_chat_template_has_generation_markers(tokenizer):
    assert "{% generation %}" in tokenizer.chat_template
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|pad|>"
