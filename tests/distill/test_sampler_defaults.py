"""The transformers backend answers with data.sampling's settings only: a target's generation_config (Qwen2.5
ships repetition_penalty 1.05 and top_k 20) must not change the distilled answers."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from distill.stage.hf_sampler import HFSampler


def _argmax_decode(model, prompt: list[int], steps: int) -> list[int]:
    ids = torch.tensor([prompt])
    for _ in range(steps):
        ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[0, len(prompt) :].tolist()


def test_greedy_answers_ignore_the_targets_repetition_penalty(standin):
    qwen = standin("qwen2_5")
    model = AutoModelForCausalLM.from_pretrained(qwen.path).eval()
    assert model.generation_config.repetition_penalty == 1.05  # the quirk under test
    tokenizer = AutoTokenizer.from_pretrained(qwen.path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "def add(a, b):"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    sampler = HFSampler(model, tokenizer, temperature=0, top_p=1.0, max_new_tokens=24, batch_size=1)
    ((answer, _),) = sampler.sample([prompt], seed=0)
    reference = _argmax_decode(model, prompt, 24)
    stop = next((i + 1 for i, t in enumerate(reference) if t in sampler.eos_ids), len(reference))
    assert answer == reference[:stop]
