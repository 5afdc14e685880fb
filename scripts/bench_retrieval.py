"""τ of drafting from the target's own answers against the store's size, beside prompt lookup, on held-out prompts.

A run's distilled answers (`--data RUN/data`) are the store; the held-out prompts are the benchmarks the eval
measures (`--prompts`, default mt_bench+humaneval, taking turns; an MT-Bench second turn follows the target's own
greedy answer to the first), refused if any of them was distilled. The target decodes each prompt greedily once
(cached in `--out`); every drafter is then replayed against those decodes: under greedy decoding the engine's
output is the target's own, so a step accepts the longest prefix of the draft that the decode continues with,
and τ (tokens per target forward, the bonus token included) is exact without running the target again. It
prints a table and one JSON line: τ of prompt lookup (vLLM's `ngram`, 2–5), of the retrieval drafter with no
store (the request's own suffix tree), with the first 1/8, 1/4, 1/2 and all of the answers, and with all of them at
each `--min-matches` pair (min_request_match:min_store_match).

Each row also gives the speed-up its steps would take on this CPU's dynamic path: every step's verification width
priced at the time the engine's probe measures for it (padded to a faster width as the engine pads,
eval/static_engine.py), drafting free (a retrieval draft is a tree walk). A draft widens the verification, so a
drafter that drafts after weak matches can reach a higher τ and a lower speed-up; this is where the family's
default match lengths come from (train/results/smollm2.md).

    python scripts/bench_retrieval.py --data runs/smollm2/<ts>/data --num-prompts 24 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import torch

from eval import machine

FRACTIONS = (0.125, 0.25, 0.5, 1.0)


def replayed_tau(proposer, prompts: list[list[int]], decodes: list[list[int]], gamma: int) -> float:
    """τ of `proposer` when the target's greedy decodes are known (see `replay`)."""
    tokens, widths = replay(proposer, prompts, decodes, gamma)
    return tokens / sum(widths.values())


def replay(proposer, prompts: list[list[int]], decodes: list[list[int]], gamma: int) -> tuple[int, Counter]:
    """The tokens decoded and {verification width: steps} of `proposer` when the target's greedy decodes are known:
    each step keeps the draft's longest prefix that the decode continues with, plus the target's own next token."""
    from eval.sampling import SamplingParams

    greedy, tokens, widths = SamplingParams(), 0, Counter()
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
            done, tokens = done + step, tokens + step
            widths[len(draft) + 1] += 1
    return tokens, widths


def priced_speedup(tokens: int, widths: Counter, width_ms: dict[int, float], padded: dict[int, int]) -> float:
    """Tokens per plain-step time when each step costs its (padded) verification width's measured time."""
    cost = sum(n * width_ms[padded.get(w, w)] for w, n in widths.items())
    return tokens * width_ms[1] / cost


def held_out_decodes(args, target, tokenizer, distilled) -> tuple[list[list[int]], list[list[int]]]:
    """The benchmarks' prompts (none of them distilled) and the target's greedy decodes, cached by content."""
    from distill.prompts.read import read_prompts
    from distill.targets.load import eos_token_ids
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


def contenders(answers: list[list[int]], vocab: int, settings: dict, min_matches: list[tuple[int, int]]):
    """(name, store tokens, proposer): prompt lookup, the retrieval drafter without a store, then growing stores,
    then the whole store at each (min_request_match, min_store_match)."""
    from eval.proposers.ngram import NgramProposer
    from eval.proposers.retrieval import RetrievalProposer
    from heads.retrieval import RetrievalDrafter

    yield "prompt lookup (ngram 2-5)", 0, NgramProposer(prompt_lookup_min=2, prompt_lookup_max=5, vocab_size=vocab)
    for fraction in (0.0, *FRACTIONS):
        kept = answers[: round(fraction * len(answers))]
        drafter = RetrievalDrafter(**settings, answers=tuple(map(tuple, kept)))
        yield f"retrieval, {len(kept)} answers", drafter.store_tokens, RetrievalProposer(drafter, vocab_size=vocab)
    for request, store in min_matches:
        matches = {"min_request_match": request, "min_store_match": store}
        drafter = RetrievalDrafter(**(settings | matches), answers=tuple(map(tuple, answers)))
        name = f"retrieval, matches ≥ {request} / {store}"
        yield name, drafter.store_tokens, RetrievalProposer(drafter, vocab_size=vocab)


def _pairs(text: str) -> list[tuple[int, int]]:
    return [tuple(int(n) for n in pair.split(":")) for pair in text.split(",") if pair]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a run's distilled data directory (RUN/data)")
    parser.add_argument("--target", default="package:smollm2-135m-instruct")
    parser.add_argument("--prompts", default="mt_bench+humaneval")
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--out", default="bench_out/retrieval", help="where the target's decodes are cached")
    parser.add_argument(
        "--min-matches", type=_pairs, default=_pairs("1:1,2:1,2:2,2:3,3:3"), help="request:store match lengths, ..."
    )
    args = parser.parse_args(argv)
    machine.announce()
    from distill.config import TargetConfig
    from distill.stage.shards import load_distilled
    from distill.targets.load import load_target, load_tokenizer
    from eval.static_engine import PAD_WIDTHS, padded_widths
    from heads.config import RetrievalConfig
    from train.stages.eval import answer_spans

    torch.set_grad_enabled(False)
    target_cfg = TargetConfig(name_or_path=args.target)
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, torch.device("cpu"))
    distilled = load_distilled(args.data)
    answers = answer_spans(distilled)
    prompts, decodes = held_out_decodes(args, target, tokenizer, distilled)
    defaults = RetrievalConfig()  # the family's defaults: what an export drafts with
    names = ("max_tree_depth", "min_request_match", "min_store_match", "max_spec_factor", "min_token_prob")
    settings = {k: getattr(defaults, k) for k in names}
    padded, width_ms = padded_widths(target, max(args.gamma + 1, PAD_WIDTHS), steps=12)
    shown = {w: round(t, 1) for w, t in width_ms.items()}
    print(f"verification widths (ms): {shown}", file=sys.stderr)
    rows = []
    for name, store_tokens, proposer in contenders(answers, len(tokenizer), settings, args.min_matches):
        tokens, widths = replay(proposer, prompts, decodes, args.gamma)
        tau, speed = tokens / sum(widths.values()), priced_speedup(tokens, widths, width_ms, padded)
        rows.append({"drafter": name, "store_tokens": store_tokens, "tau": round(tau, 4), "speedup": round(speed, 3)})
        line = f"{name:34s} store {store_tokens:7d} tokens  τ {tau:.3f}  priced speed-up {speed:.2f}×"
        print(line, file=sys.stderr, flush=True)
    lookup = rows[0]["tau"]
    result = {
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "gamma": args.gamma,
        "width_ms": {str(w): round(t, 2) for w, t in width_ms.items()},
        "rows": rows,
        "tau_ratio_vs_prompt_lookup": round(rows[1 + len(FRACTIONS)]["tau"] / lookup, 4),  # the whole store
        "fastest": max(rows, key=lambda r: r["speedup"])["drafter"],
    }
    print(json.dumps(machine.with_machine(result)))
    return result


if __name__ == "__main__":
    main()
