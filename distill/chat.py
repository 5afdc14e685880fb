"""Chat formatting: prompts through the target's own chat template, assistant-only loss masks."""

from __future__ import annotations

import hashlib

from distill.errors import DistillError

ROLES = ("system", "user", "assistant")


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation without its trailing assistant turns: the turn the target answers next.

    The same rule as eval.prompts.prompt_messages (eval may not import distill), so a drafter is
    distilled on the prompts it is measured on; tests/eval/test_prompts.py holds the two equal."""
    end = len(messages)
    while end and messages[end - 1]["role"] == "assistant":
        end -= 1
    return messages[:end]


def owes_answer(message: dict) -> bool:
    """An assistant turn the target writes itself: content None. A `turns` row (distill/prompts.py) owes one
    between each two of its user turns, answered turn by turn, as MT-Bench and Spec-Bench answer them."""
    return message["role"] == "assistant" and message.get("content") is None


def pending_turn(messages: list[dict]) -> tuple[list[dict], bool]:
    """The prompt the target answers next, and whether the conversation owes more answers after it: the messages
    before its first owed answer, else the conversation without its trailing assistant turns (prompt_messages).

    The same rule as eval.prompts.pending_turn; tests/eval/test_prompts.py holds the two equal."""
    for i, m in enumerate(messages):
        if owes_answer(m):
            return messages[:i], True
    return prompt_messages(messages), False


def answered(messages: list[dict], text: str) -> list[dict]:
    """The conversation with its first owed answer written: `text`, the target's answer to the turn before it."""
    i = next(i for i, m in enumerate(messages) if owes_answer(m))
    return [*messages[:i], {"role": "assistant", "content": text}, *messages[i + 1 :]]


def encode_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `messages` followed by the template's assistant generation prompt."""
    return list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )


def encode_chat(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of a whole conversation and its assistant mask (1 on assistant-written tokens).

    The mask comes from the template's `{% generation %}` markers, so it covers exactly what the
    template marks as the assistant's (its content and end-of-turn token).
    """
    if "{% generation %}" not in (tokenizer.chat_template or "").replace("{%- generation %}", "{% generation %}"):
        raise DistillError(
            "the tokenizer's chat template has no {% generation %} markers, so assistant loss masks "
            "can't be derived; set data.regenerate=true or use a template with generation markers"
        )
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return list(enc["input_ids"]), list(enc["assistant_masks"])


def tokenizer_hash(tokenizer) -> str:
    """Fingerprint of the vocabulary, merges, special tokens and chat template."""
    h = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    h.update((tokenizer.chat_template or "").encode())
    return h.hexdigest()[:16]
