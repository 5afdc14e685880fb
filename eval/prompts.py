"""Eval prompts, templated alike for `python -m eval` and the pipeline's eval stage: conversations (both read
them with distill.prompts.read.read_prompts; eval itself imports only heads) without their trailing assistant turns
(the reference answers), through the target's chat template with the assistant generation prompt — what a server
receives. Raw text (a base model's completion prompt, role TEXT) is measured as its own ids, as a completion
endpoint receives it.

A conversation of `turns` (MT-Bench, Spec-Bench: user turns with the answers the target owes between them,
assistant messages with content None) is measured turn by turn, as those benchmarks measure it: one prompt per
turn, turn k's prompt holding the target's own answers to the turns before, decoded first (untimed) by our
autoregressive decoding under eval's sampling settings.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import torch
from jinja2.exceptions import TemplateError

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate

Answer = Callable[[list[int]], list[int]]  # prompt ids → the target's answer ids
TEXT = "text"  # raw text the target continues, untemplated (a completion prompt): distill.prompts.chat.TEXT, restated


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation without its trailing assistant turns: the turn the target answers next."""
    end = len(messages)
    while end and messages[end - 1].get("role") == "assistant":
        end -= 1
    return messages[:end]


def _owes_answer(message: dict) -> bool:
    return message.get("role") == "assistant" and message.get("content") is None


def pending_turn(messages: list[dict]) -> tuple[list[dict], bool]:
    """The prompt the target answers next, and whether the conversation owes more answers after it: the messages
    before its first owed answer (content None), else prompt_messages(messages). distill.prompts.chat's rule,
    restated."""
    for i, m in enumerate(messages):
        if _owes_answer(m):
            return messages[:i], True
    return prompt_messages(messages), False


def answered(messages: list[dict], text: str) -> list[dict]:
    """The conversation with its first owed answer written: `text`, the target's answer to the turn before it."""
    i = next(i for i, m in enumerate(messages) if _owes_answer(m))
    return [*messages[:i], {"role": "assistant", "content": text}, *messages[i + 1 :]]


OVERLONG = ("refuse", "truncate")


def prompt_room(target, proposer, cfg: EvalConfig) -> int:
    """The longest prompt the target's context holds with max_new_tokens and the longest block a step verifies
    after it (a tree's depth, else the largest γ): longer ones are refused or truncated (eval.overlong_prompts)."""
    lookahead = proposer.tree_depth or max([cfg.num_speculative_tokens, *cfg.gamma_sweep])
    return target.config.max_position_embeddings - cfg.max_new_tokens - lookahead - 1


def target_answers(target, cfg: EvalConfig, *, eos_ids: set[int], vocab_size: int) -> Answer:
    """The target's own answer to one prompt: our autoregressive decoding (cache path: dynamic) of up to
    eval.max_new_tokens tokens under eval's sampling settings (seeded by eval.seed), cut at the end-of-turn."""
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
    generator = torch.Generator(device=next(target.parameters()).device).manual_seed(cfg.seed)

    def answer(ids: list[int]) -> list[int]:
        return autoregressive_generate(
            target, [ids], cfg.max_new_tokens, params, eos_ids=eos_ids, vocab_size=vocab_size, generator=generator
        )[0]

    return answer


@dataclass(frozen=True)
class MeasuredPrompts:
    """The prompts eval decodes, and each one's category (its row's; None = none given)."""

    ids: list[list[int]]
    categories: list[Optional[str]]


def measured_prompts(
    conversations: Iterable[list[dict]],
    tokenizer,
    *,
    limit: int,
    max_len: Optional[int] = None,
    overlong: str = "refuse",
    categories: Optional[Sequence[Optional[str]]] = None,
    answer: Optional[Answer] = None,
    repeat_block: int = 0,
) -> MeasuredPrompts:
    """Token ids of up to `limit` prompts: one per conversation, one per turn of a `turns` conversation.

    Args:
        max_len: the most prompt tokens the target's context leaves room for (None: no bound).
        overlong: a longer prompt is refused (one error naming it), or truncated to its last max_len
            tokens and counted in a warning.
        categories: per conversation, its category (None: none given); each of its prompts carries it.
        answer: the target's answer to a prompt (target_answers), written into a `turns` conversation's next
            prompt; needed only by such conversations.
        repeat_block: > 0: every block of this many prompts is followed by itself again (eval.repeat_block), the
            `limit` prompts half repeats; 0: each prompt once.
    """
    if repeat_block > 0:
        distinct = measured_prompts(
            conversations,
            tokenizer,
            limit=_distinct(limit, repeat_block),
            max_len=max_len,
            overlong=overlong,
            categories=categories,
            answer=answer,
        )
        return _asked_twice(distinct, repeat_block, limit)
    if overlong not in OVERLONG:
        raise EvalError(f"eval.overlong_prompts={overlong!r}; use one of {list(OVERLONG)}")
    if isinstance(getattr(tokenizer, "deprecation_warnings", None), dict):  # lengths are bounded here (max_len):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True  # one message
    out, truncated = MeasuredPrompts([], []), 0
    pairs = zip(conversations, itertools.repeat(None) if categories is None else categories)
    for number, (messages, category) in enumerate(pairs, 1):
        for turn in itertools.count(1):
            if len(out.ids) >= limit:
                break
            prompt, more = pending_turn(messages)
            where = f"eval prompt {number}" + (f" (turn {turn})" if turn > 1 or more else "")
            if not any(m.get("role") in ("user", TEXT) for m in prompt):
                raise EvalError(f"{where} has no user turn to answer; give it a {{'role': 'user'}} message")
            ids = _template(prompt, tokenizer, where)
            if max_len is not None and len(ids) > max_len:
                if overlong == "refuse":
                    raise EvalError(
                        f"{where} has {len(ids)} tokens; with the new tokens and drafts it would pass the target's "
                        f"context (room for {max_len}): shorten it, lower eval.max_new_tokens, or set "
                        "eval.overlong_prompts=truncate"
                    )
                ids, truncated = ids[-max_len:], truncated + 1
            out.ids.append(ids)
            out.categories.append(category)
            if not more:
                break
            if answer is None:
                raise EvalError(f"{where} is a turn of a `turns` row: its next turn needs the target's answer")
            messages = answered(messages, tokenizer.decode(answer(ids), skip_special_tokens=True))
        if len(out.ids) >= limit:
            break
    if not out.ids:
        raise EvalError("no eval prompts: the prompts file or split is empty")
    if truncated:
        print(f"[eval] warning: truncated {truncated} of {len(out.ids)} prompts to their last {max_len} tokens")
    return out


def _distinct(limit: int, block: int) -> int:
    """How many distinct prompts `limit` decodes hold when every block of `block` is asked twice."""
    full, rest = divmod(limit, 2 * block)
    return full * block + min(rest, block)


def _asked_twice(prompts: MeasuredPrompts, block: int, limit: int) -> MeasuredPrompts:
    """Each block of `block` prompts, then the same block again, cut to `limit`."""
    n = len(prompts.ids)
    blocks = [list(range(start, min(start + block, n))) for start in range(0, n, block)]
    order = [i for b in blocks for i in b + b][:limit]
    return MeasuredPrompts([prompts.ids[i] for i in order], [prompts.categories[i] for i in order])


def prompt_ids(
    conversations: Iterable[list[dict]],
    tokenizer,
    *,
    limit: int,
    max_len: Optional[int] = None,
    overlong: str = "refuse",
    answer: Optional[Answer] = None,
) -> list[list[int]]:
    """The token ids of measured_prompts (same arguments), without categories."""
    return measured_prompts(
        conversations, tokenizer, limit=limit, max_len=max_len, overlong=overlong, answer=answer
    ).ids


def _template(prompt: list[dict], tokenizer, where: str) -> list[int]:
    """A chat prompt through the target's template; raw text as its own ids (distill.prompts.chat.encode_prompt's
    rule)."""
    if prompt[0].get("role") == TEXT:
        return list(tokenizer(prompt[0]["content"])["input_ids"])
    if not tokenizer.chat_template:
        raise EvalError(
            f"{where} is a chat conversation, and the target has no chat template (a base model?): give it raw text "
            '({"text": …} rows, or a completion prompt set such as humaneval_completion), or pass the template it '
            "was trained with (target.chat_template=FILE.jinja; python -m eval: chat_template=FILE.jinja)"
        )
    try:
        chat = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
    except TemplateError as e:  # Gemma's and Mistral's templates raise on a system turn
        raise EvalError(
            f"the target's chat template refuses {where} ({e}); remove that turn from the prompts "
            "or pass a chat template that accepts it"
        ) from None
    return list(chat["input_ids"])
