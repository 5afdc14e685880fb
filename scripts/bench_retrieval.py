"""τ of drafting from the target's own answers against the store's size, beside prompt lookup, on held-out prompts.

A run's distilled answers (`--data RUN/data`) are the store; the held-out prompts are the benchmarks the eval
measures (`--prompts`, default mt_bench+humaneval, taking turns; an MT-Bench second turn follows the target's own
greedy answer to the first), refused if any of them was distilled. The target decodes each prompt greedily once
(cached in `--out`); every drafter is then replayed against those decodes: under greedy decoding the engine's
output is the target's own, so a step accepts the longest prefix of the draft that the decode continues with,
and τ (tokens per target forward, the bonus token included) is exact without running the target again. It
prints a table and one JSON line: τ of prompt lookup (vLLM's `ngram`, 2–5), of the retrieval drafter with no
store (the request's own suffix tree), and with the first 1/8, 1/4, 1/2 and all of the answers.

    python scripts/bench_retrieval.py --data runs/smollm2/<ts>/data --num-prompts 24 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

from eval import machine

FRACTIONS = (0.125, 0.25, 0.5, 1.0)


def replayed_tau(proposer, prompts: list[list[int]], decodes: list[list[int]], gamma: int) -> float:
    """τ of `proposer` when the target's greedy decodes are known: each step keeps the draft's longest prefix
    that the decode continues with, plus the target's own next token."""
    from eval.sampling import SamplingParams

    greedy, tokens, steps = SamplingParams(), 0, 0
    for prompt, decode in zip(prompts, decodes):
        proposer.reset(1)
        sequence, done = list(prompt), 0
        while done < len(decode):
            proposal = proposer.propose([sequence], gamma, greedy)
            count = proposal.draft_tokens.shape[1] if proposal.num_draft is None else int(proposal.num_draft[0])
            draft = proposal.draft_tokens[0, :count].tolist()
            kept = 0
            while kept < len(draft) and done + kept < len(decode) and draft[kept] == decode[done + kept]:
                kept += 1
            step = min(kept + 1, len(decode) - done)
            sequence += decode[done : done + step]
            proposer.accept([len(sequence)])
            done, tokens, steps = done + step, tokens + step, steps + 1
    return tokens / steps


def held_out_decodes(args, target, tokenizer, distilled) -> tuple[list[list[int]], list[list[int]]]:
    """The benchmarks' prompts (none of them distilled) and the target's greedy decodes, cached by content."""
    from distill.prompts import read_prompts
    from distill.target import eos_token_ids
    from eval.config import EvalConfig
    from eval.prompts import prompt_ids, target_answers
    from eval.sampling import SamplingParams
    from eval.speculative import autoregressive_generate
    from train.eval_prompts import training_overlap

    eos = eos_token_ids(target, tokenizer)
    key = hashlib.sha256(json.dumps([args.target, args.prompts, args.num_prompts, args.max_new_tokens]).encode())
    cache = Path(args.out) / f"decodes-{key.hexdigest()[:16]}.json"
    if cache.is_file():
        cached = json.loads(cache.read_text())
        prompts, decodes = cached["prompts"], cached["decodes"]
    else:
        convs = read_prompts(args.prompts, None).across_categories().conversations
        first_turns = EvalConfig(temperature=0, max_new_tokens=args.max_new_tokens)
        answer = target_answers(target, first_turns, eos_ids=eos, vocab_size=len(tokenizer))
        prompts = prompt_ids(convs, tokenizer, limit=args.num_prompts, answer=answer)
        greedy = SamplingParams()
        decodes = [
            autoregressive_generate(target, [p], args.max_new_tokens, greedy, eos_ids=eos, vocab_size=len(tokenizer))[0]
            for p in prompts
        ]
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"prompts": prompts, "decodes": decodes}))
    overlap = training_overlap(prompts, distilled)["overlap"]
    if overlap:
        sys.exit(f"{overlap} of the {len(prompts)} prompts are in {args.data}'s distilled data; measure on others")
    return prompts, decodes


def contenders(answers: list[list[int]], vocab: int, settings: dict):
    """(name, store tokens, proposer): prompt lookup, the retrieval drafter without a store, then growing stores."""
    from eval.proposers.ngram import NgramProposer
    from eval.proposers.retrieval import RetrievalProposer
    from heads.retrieval import RetrievalDrafter

    yield "prompt lookup (ngram 2-5)", 0, NgramProposer(prompt_lookup_min=2, prompt_lookup_max=5, vocab_size=vocab)
    for fraction in (0.0, *FRACTIONS):
        kept = answers[: round(fraction * len(answers))]
        drafter = RetrievalDrafter(**settings, answers=tuple(map(tuple, kept)))
        yield f"retrieval, {len(kept)} answers", drafter.store_tokens, RetrievalProposer(drafter, vocab_size=vocab)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a run's distilled data directory (RUN/data)")
    parser.add_argument("--target", default="package:smollm2-135m-instruct")
    parser.add_argument("--prompts", default="mt_bench+humaneval")
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--out", default="bench_out/retrieval", help="where the target's decodes are cached")
    args = parser.parse_args(argv)
    machine.announce()
    from distill.config import TargetConfig
    from distill.shards import load_distilled
    from distill.target import load_target, load_tokenizer
    from heads.config import RetrievalConfig
    from train.stages.eval import answer_spans

    torch.set_grad_enabled(False)
    target_cfg = TargetConfig(name_or_path=args.target)
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, torch.device("cpu"))
    distilled = load_distilled(args.data)
    answers = answer_spans(distilled)
    prompts, decodes = held_out_decodes(args, target, tokenizer, distilled)
    defaults = RetrievalConfig()  # the family's defaults: what an export drafts with
    settings = {k: getattr(defaults, k) for k in ("max_tree_depth", "min_store_match", "max_spec_factor")}
    settings["min_token_prob"] = defaults.min_token_prob
    rows = []
    for name, store_tokens, proposer in contenders(answers, len(tokenizer), settings):
        tau = replayed_tau(proposer, prompts, decodes, args.gamma)
        rows.append({"drafter": name, "store_tokens": store_tokens, "tau": round(tau, 4)})
        print(f"{name:32s} store {store_tokens:7d} tokens  τ {rows[-1]['tau']:.3f}", file=sys.stderr, flush=True)
    lookup = rows[0]["tau"]
    result = {
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "gamma": args.gamma,
        "rows": rows,
        "tau_ratio_vs_prompt_lookup": round(rows[-1]["tau"] / lookup, 4),
    }
    print(json.dumps(machine.with_machine(result)))
    return result


if __name__ == "__main__":
    main()
