"""Prompt formatting: chat prompts through the target's own chat template, raw text as it is (a base model's
completion prompt), and assistant-only loss masks."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from distill.errors import DistillError

ROLES = ("system", "user", "assistant")
TEMPLATE_FILES = (".jinja", ".jinja2", ".j2")
# A prompt of raw text the target continues, untemplated: a {"text": …} row or a completion prompt set, read as one
# message of this role (eval.prompts.TEXT, restated there); the target's continuation follows as the assistant's.
TEXT = "text"


def is_text(messages: list[dict]) -> bool:
    """The prompt is raw text to continue (a completion), not a chat turn."""
    return bool(messages) and messages[0]["role"] == TEXT


def asks(messages: list[dict]) -> bool:
    """The prompt asks the target for something: a user turn, or text to continue."""
    return any(m["role"] in ("user", TEXT) for m in messages)


NO_TEMPLATE = (
    "is a chat conversation, and the target has no chat template (a base model?): give it raw text to continue "
    '({"text": …} rows, or a completion prompt set such as stdlib_continue), or set target.chat_template=FILE.jinja '
    "to the template it was trained with"
)


def template_text(value: Optional[str], setting: str = "target.chat_template") -> Optional[str]:
    """A chat template as given: its text, or a file holding it (`….jinja`; quoting a multi-line Jinja string through
    Hydra is hard), read now so that the run's settings, hashes and provenance hold the text itself."""
    if value is None or "{" in value:  # Jinja text: every template has a {{ … }} or {% … %}
        return value
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text()
    raise DistillError(
        f"{setting}={value}: no such file, and no Jinja template either; give a template file "
        f"({'/'.join(TEMPLATE_FILES)}) or the template's text"
    )


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation without its trailing assistant turns: the turn the target answers next.

    The same rule as eval.prompts.prompt_messages (eval may not import distill), so a drafter is
    distilled on the prompts it is measured on; tests/eval/test_prompts.py holds the two equal."""
    end = len(messages)
    while end and messages[end - 1]["role"] == "assistant":
        end -= 1
    return messages[:end]


def owes_answer(message: dict) -> bool:
    """An assistant turn the target writes itself: content None. A `turns` row (distill/prompts/read.py) owes one
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


def encode_prompt(tokenizer, messages: list[dict], where: str = "a prompt") -> list[int]:
    """Token ids of `messages` followed by the template's assistant generation prompt; of raw text, its own ids (with
    the tokenizer's start token, as llama.cpp's and vLLM's completion endpoints encode a prompt)."""
    if is_text(messages):
        return list(tokenizer(messages[0]["content"])["input_ids"])
    return _encode(tokenizer, messages, add_generation_prompt=True, where=where)


def encode_chat(tokenizer, messages: list[dict], where: str = "a conversation") -> tuple[list[int], list[int]]:
    """Token ids of a whole conversation and its assistant mask (1 on assistant-written tokens: each answer's content
    and its end-of-turn token).

    From the template's `{% generation %}` markers where it has them. Templates without (ChatML as SmolLM2 and Qwen
    ship it, Llama 3's) get it from the rendered text: each answer is what the conversation up to it adds after the
    generation prompt before it, cut after its end-of-turn token.
    """
    if is_text(messages):  # the text's ids, then its continuation's (kept from the dataset), tokenized on their own
        prompt = encode_prompt(tokenizer, messages[:1])
        answer = "".join(m["content"] for m in messages[1:] if m["role"] == "assistant")
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"] if answer else []
        return prompt + list(ids), [0] * len(prompt) + [1] * len(ids)
    if not tokenizer.chat_template:
        raise DistillError(f"{where} {NO_TEMPLATE}")
    if "{% generation %}" in (tokenizer.chat_template or "").replace("{%- generation %}", "{% generation %}"):
        enc = tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        return list(enc["input_ids"]), list(enc["assistant_masks"])
    return _mask_by_text(tokenizer, messages)


def _mask_by_text(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """encode_chat for a template without generation markers: the rendered conversation cut into the template's text
    and each answer's (content through its end-of-turn token), tokenized piece by piece. The first answer's tokens
    then follow exactly the prompt ids the target answers (encode_prompt), where tokenizing the whole text would
    merge the generation prompt's last newline into the answer (SmolLM2's BPE does). Refused where the template
    re-renders earlier turns as the conversation grows (no prefix to cut at)."""
    text = _render(tokenizer, messages, add_generation_prompt=False)
    pieces, at = [], 0  # (text, is the answer's)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], add_generation_prompt=True)
        upto = _render(tokenizer, messages[: i + 1], add_generation_prompt=False)
        if not (text.startswith(before) and text.startswith(upto) and at <= len(before) <= len(upto)):
            raise DistillError(
                "the tokenizer's chat template has no {% generation %} markers and renders earlier turns differently "
                "as a conversation grows, so assistant loss masks can't be derived; set data.regenerate=true or use "
                "a template with generation markers"
            )
        answer = upto[len(before) :]
        eos = tokenizer.eos_token
        if eos and eos in answer:  # the template's text after the end-of-turn token is not the answer's
            answer = answer[: answer.rindex(eos) + len(eos)]
        pieces += [(text[at : len(before)], 0), (answer, 1)]
        at = len(before) + len(answer)
    pieces.append((text[at:], 0))
    ids, mask = [], []
    for piece, is_answer in pieces:
        tokens = tokenizer(piece, add_special_tokens=False)["input_ids"] if piece else []
        ids += tokens
        mask += [is_answer] * len(tokens)
    return ids, mask


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)


def _encode(tokenizer, messages: list[dict], add_generation_prompt: bool, where: str) -> list[int]:
    if not tokenizer.chat_template:
        raise DistillError(f"{where} {NO_TEMPLATE}")
    enc = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True
    )
    return list(enc["input_ids"])


def tokenizer_hash(tokenizer) -> str:
    """Fingerprint of the vocabulary, merges, special tokens and chat template."""
    h = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    h.update((tokenizer.chat_template or "").encode())
    return h.hexdigest()[:16]
