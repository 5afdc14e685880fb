"""Eval prompts, templated alike for `python -m eval` and the pipeline's eval stage: conversations (both read
them with distill.prompts.load_conversations; eval itself imports only heads) without their trailing assistant
turns (the reference answers), through the target's chat template with the assistant generation prompt — what
a server receives."""

from __future__ import annotations

from typing import Iterable, Optional

from jinja2.exceptions import TemplateError

from eval.config import EvalConfig
from eval.errors import EvalError


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation without its trailing assistant turns: the turn the target answers next."""
    end = len(messages)
    while end and messages[end - 1].get("role") == "assistant":
        end -= 1
    return messages[:end]


OVERLONG = ("refuse", "truncate")


def prompt_room(target, proposer, cfg: EvalConfig) -> int:
    """The longest prompt the target's context holds with max_new_tokens and the longest block a step verifies
    after it (a tree's depth, else the largest γ): longer ones are refused or truncated (eval.overlong_prompts)."""
    lookahead = proposer.tree_depth or max([cfg.num_speculative_tokens, *cfg.gamma_sweep])
    return target.config.max_position_embeddings - cfg.max_new_tokens - lookahead - 1


def prompt_ids(
    conversations: Iterable[list[dict]],
    tokenizer,
    *,
    limit: int,
    max_len: Optional[int] = None,
    overlong: str = "refuse",
) -> list[list[int]]:
    """Token ids of up to `limit` prompts.

    Args:
        max_len: the most prompt tokens the target's context leaves room for (None: no bound).
        overlong: a longer prompt is refused (one error naming it), or truncated to its last max_len
            tokens and counted in a warning.
    """
    if overlong not in OVERLONG:
        raise EvalError(f"eval.overlong_prompts={overlong!r}; use one of {list(OVERLONG)}")
    out, truncated = [], 0
    if isinstance(getattr(tokenizer, "deprecation_warnings", None), dict):  # lengths are bounded here (max_len):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True  # one message
    for number, messages in enumerate(conversations, 1):
        prompt = prompt_messages(messages)
        if not any(m.get("role") == "user" for m in prompt):
            raise EvalError(f"eval prompt {number} has no user turn to answer; give it a {{'role': 'user'}} message")
        try:
            chat = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
        except TemplateError as e:  # Gemma's and Mistral's templates raise on a system turn
            raise EvalError(
                f"the target's chat template refuses eval prompt {number} ({e}); remove that turn from the prompts "
                "or pass a chat template that accepts it"
            ) from None
        ids = list(chat["input_ids"])
        if max_len is not None and len(ids) > max_len:
            if overlong == "refuse":
                raise EvalError(
                    f"eval prompt {number} has {len(ids)} tokens; with the new tokens and drafts it would pass the "
                    f"target's context (room for {max_len}): shorten it, lower eval.max_new_tokens, or set "
                    "eval.overlong_prompts=truncate"
                )
            ids, truncated = ids[-max_len:], truncated + 1
        out.append(ids)
        if len(out) >= limit:
            break
    if not out:
        raise EvalError("no eval prompts: the prompts file or split is empty")
    if truncated:
        print(f"[eval] warning: truncated {truncated} of {len(out)} prompts to their last {max_len} tokens")
    return out
