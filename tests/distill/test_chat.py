import copy

import pytest

from distill.errors import DistillError
from distill.prompts.chat import encode_chat, encode_prompt, prompt_messages
from distill.toyworld.tokenizer import ASSISTANT, END

# a conversation with a system turn and two answers, each answer's mask checked
TWO_ANSWERS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "def add(a, b):\n"},
    {"role": "assistant", "content": "    return a + b\n"},
    {"role": "user", "content": "class A:\n"},
    {"role": "assistant", "content": "    pass\n"},
]


def test_assistant_mask_covers_exactly_the_assistant_spans(tokenizer):
    messages = TWO_ANSWERS
    ids, mask = encode_chat(tokenizer, messages)
    assert len(ids) == len(mask)
    # Rebuild the expected mask from the pieces: 1 exactly on each assistant content + its end token.
    expected = []
    for m in messages:
        role_tok = {"system": "<|system|>", "user": "<|user|>", "assistant": ASSISTANT}[m["role"]]
        head = tokenizer.convert_tokens_to_ids([role_tok])
        body = tokenizer(m["content"], add_special_tokens=False)["input_ids"] + tokenizer.convert_tokens_to_ids([END])
        expected += [0] * len(head) + [int(m["role"] == "assistant")] * len(body)
    assert mask == expected
    spans = [tokenizer.decode([t for t, k in zip(ids, mask) if k])]
    assert spans == ["    return a + b\n<|end|>    pass\n<|end|>"]


def test_prompt_drops_the_last_assistant_turn_and_adds_the_generation_prompt(tokenizer):
    messages = [{"role": "user", "content": "x = 1\n"}, {"role": "assistant", "content": "y = 2\n"}]
    assert prompt_messages(messages) == messages[:1]
    ids = encode_prompt(tokenizer, prompt_messages(messages))
    assert tokenizer.decode(ids) == "<|user|>x = 1\n<|end|><|assistant|>"


def _without_markers(template: str) -> str:
    import re

    return re.sub(r"{%-? ?(end)?generation ?-?%}", "", template)


def test_a_template_without_generation_markers_masks_the_answers_as_the_markers_would(tokenizer):
    # ChatML as SmolLM2, Qwen and Llama 3 ship it has no {% generation %} markers: a dataset's own answers
    # (data.regenerate=false) get their mask from the rendered text, equal to what the markers give
    messages = TWO_ANSWERS
    marked = encode_chat(tokenizer, messages)
    plain = copy.copy(tokenizer)
    plain.chat_template = _without_markers(tokenizer.chat_template)
    assert "{% generation" not in plain.chat_template and "{%- generation" not in plain.chat_template
    assert encode_chat(plain, messages) == marked


def test_a_template_that_rerenders_earlier_turns_is_refused_in_one_line(tokenizer):
    plain = copy.copy(tokenizer)
    plain.chat_template = "{{ messages | length }}" + _without_markers(tokenizer.chat_template)
    messages = [{"role": "user", "content": "x = 1\n"}, {"role": "assistant", "content": "y = 2\n"}]
    with pytest.raises(DistillError, match="renders earlier turns differently .* set data.regenerate=true"):
        encode_chat(plain, messages)
