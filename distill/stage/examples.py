"""The prompts of data.prompts and data.mix (or a corpus's windows) as the examples the target answers: their
token ids in file order, the held-out slice left out, and why the others were dropped."""

from __future__ import annotations

from collections import Counter

from jinja2.exceptions import TemplateError

from distill.config import DataConfig, PromptSource, TargetConfig
from distill.errors import DistillError
from distill.prompts.chat import asks, encode_chat, encode_prompt, owes_answer, pending_turn
from distill.prompts.corpus_windows import conversation_text, corpus_examples
from distill.prompts.heldout import heldout_indices, holdout_active
from distill.prompts.read import load_conversations
from distill.targets.toyworld import toyworld_corpus, toyworld_prompts

NO_USER, TOO_LONG = "without a user turn", "longer than data.max_prompt_tokens"


def prompt_examples(target: TargetConfig, data: DataConfig, tokenizer) -> tuple[list[dict], Counter, list[int], int]:
    """The prompts of data.prompts and data.mix, encoded; why others were dropped ({reason: count}); the positions
    in data.prompts of the held-out slice left out for eval (distill/prompts/heldout.py); how many come from
    data.prompts (they come first: distill/stage/extend.py keeps them when data.max_prompts grows)."""
    examples, dropped, offset, heldout, first_source = [], Counter(), 0, [], 0
    first = PromptSource(data.prompts, data.split, data.max_prompts, data.prompts_column)
    for number, source in enumerate([first, *data.mix]):
        if not source.prompts:
            raise DistillError("every data.mix entry needs prompts=<file, dataset directory or HF dataset name>")
        mix = f"data.mix[{number - 1}]"  # its settings, named in messages
        keys = {} if number == 0 else {"prompts_key": f"{mix}.prompts", "split_key": f"{mix}.split"}
        conversations = load_conversations(
            source.prompts,
            source.split,
            toyworld_prompts(target.name_or_path, source.split),
            column=source.prompts_column,
            **keys,
        )
        held = set()  # the held-out slice of data.prompts: never distilled (eval measures it)
        if number == 0 and holdout_active(data.prompts, data.holdout):
            heldout = heldout_indices(len(conversations), data.holdout, data.holdout_seed)
            held = set(heldout)
        more, why = _encode(
            tokenizer,
            conversations,
            data,
            source.max_prompts,
            first_index=offset,
            skip=frozenset(held),
            key=keys.get("prompts_key", "data.prompts"),
        )
        offset += len(conversations)
        examples, dropped = examples + more, dropped + why
        first_source = len(examples) if number == 0 else first_source
    if not examples and dropped[NO_USER]:
        others = Counter({why: n for why, n in dropped.items() if why != NO_USER})
        raise DistillError(
            f"no usable prompt: {dropped[NO_USER]} conversations have no user turn to answer"
            + (f" (and {reasons_text(others)})" if others else "")
            + '; give each {"messages": [...]} a {"role": "user", ...} message'
        )
    if not examples and dropped[TOO_LONG]:
        raise DistillError(f"no prompt fits data.max_prompt_tokens={data.max_prompt_tokens}; raise it")
    if not examples:
        raise DistillError(
            f"no usable prompt: {reasons_text(dropped)}; drop the turns the target's chat template refuses from the "
            "prompts, or set target.chat_template to a template that accepts them"
        )
    return examples, dropped, heldout, first_source


def reasons_text(dropped: Counter) -> str:
    return ", ".join(f"{n} {why}" for why, n in dropped.most_common())


def corpus_rows(target: TargetConfig, data: DataConfig, tokenizer) -> list[dict]:
    """data.source=corpus: raw-text windows, every token a loss position (padding aside)."""
    texts = toyworld_corpus(target.name_or_path)
    if texts is None:
        conversations = load_conversations(data.prompts, data.split, None, column=data.prompts_column)
        texts = [conversation_text(c) for c in conversations]
    examples = corpus_examples(texts, tokenizer, data.corpus_window, data.max_prompts, data.sampling.seed)
    return [ex | {"finish_reason": "corpus"} for ex in examples]


def _encode(
    tokenizer,
    conversations,
    data: DataConfig,
    max_prompts: int,
    first_index: int = 0,
    skip: frozenset = frozenset(),
    key: str = "data.prompts",
) -> tuple[list[dict], Counter]:
    """Token ids per usable conversation, in file order, and why the others were dropped ({reason: count}):
    too long, no user turn, or refused by the target's chat template (Gemma and Mistral raise on a system turn).

    prompt_index counts from first_index, so indices stay unique across mixed sources; conversations at
    positions in `skip` (the held-out slice) are left out; `key`: the setting naming the source, in messages.
    """
    examples, dropped = [], Counter()
    for index, messages in enumerate(conversations, first_index):
        if max_prompts and len(examples) >= max_prompts:
            break
        if index - first_index in skip:
            continue
        try:
            example = _example(tokenizer, messages, index, data.regenerate, f"{key} row {index - first_index + 1}")
        except TemplateError as e:
            dropped[f"refused by the target's chat template ({e})"] += 1
            continue
        if example is None:
            dropped[NO_USER] += 1
        elif len(example["prompt_ids"]) > data.max_prompt_tokens:
            dropped[TOO_LONG] += 1
        else:
            examples.append(example)
    return examples, dropped


def _example(tokenizer, messages: list[dict], index: int, regenerate: bool, where: str) -> dict | None:
    """One conversation's prompt ids (and, keeping the dataset's answers, its ids and loss mask); None: no user turn.

    A conversation that owes the target's answers (a `turns` row) keeps its messages: its later turns are encoded
    once the target has answered the earlier ones (_answers)."""
    if regenerate:
        prompt, more = pending_turn(messages)
        if not asks(prompt):
            return None
        return {"prompt_index": index, "prompt_ids": encode_prompt(tokenizer, prompt, where)} | (
            {"messages": messages} if more else {}
        )
    if any(owes_answer(m) for m in messages):
        raise DistillError(
            f"prompt {index} is a `turns` row, which holds no answers to keep (data.regenerate=false); set "
            "data.regenerate=true so that the target answers its turns"
        )
    ids, mask = encode_chat(tokenizer, messages, where)
    first = mask.index(1) if 1 in mask else len(mask)
    return {"prompt_index": index, "prompt_ids": ids[:first], "input_ids": ids, "loss_mask": mask}
