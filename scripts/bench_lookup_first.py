"""Learned and retrieved drafts together, against each part alone and plain decoding, on held-out prompts.

A main job's two exports (its EAGLE-3 and its retrieval store, `--eagle RUN/smollm2/drafter --retrieval
RUN/smollm2_retrieval/drafter`) are measured in the real speculative loop on the benchmarks' prompts that were not
distilled (the prompts and the target's greedy decodes of scripts/bench_retrieval.py, cached in `--out`): plain
decoding, EAGLE-3 alone at its γ, retrieval alone at its γ, and lookup-first drafting (eval/lookup_first.py: the
retrieval draft where its match is ≥ m tokens, EAGLE-3's elsewhere) for each m of `--min-match`. Every prompt is
decoded by all of them in turn between two plain decodes, so machine noise hits every side alike. Greedy: every
output must equal the target's greedy decode. It prints a table and one JSON line: per contender τ, speed-up (with
its 95 % interval over prompts), the cost of a drafter forward (c) and of all drafting per step, both against a
plain step, and how many steps each part drafted.

    python scripts/bench_lookup_first.py --eagle runs/smollm2/<ts>/smollm2/drafter \\
        --retrieval runs/smollm2/<ts>/smollm2_retrieval/drafter --data runs/smollm2/<ts>/data
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from eval import machine


def contenders(args, target, vocab: int) -> dict:
    """name → (proposer, γ): each part alone, then lookup-first at each minimum match."""
    from eval.config import EvalConfig
    from eval.lookup_first import LookupFirstProposer
    from eval.proposers import load_proposer
    from heads.families import read_export

    cfg, cpu = EvalConfig(temperature=0.0, tree=None), torch.device("cpu")

    def load(path):
        return load_proposer(read_export(path), target, vocab, cfg, cpu)[0]

    built = {"eagle3": (load(args.eagle), args.eagle_gamma), "retrieval": (load(args.retrieval), args.gamma)}
    for m in args.min_match:
        both = LookupFirstProposer(load(args.eagle), load(args.retrieval), m, learned_max=args.eagle_gamma)
        built[f"lookup-first m≥{m}"] = (both, args.gamma)
    return built


def decode_all(target, built: dict, prompts, decodes, max_new: int, eos: set[int], vocab: int) -> dict:
    """Per prompt: plain, every contender, plain again (timed); outputs checked against the greedy decodes."""
    from eval.sampling import SamplingParams
    from eval.speculative import DecodeStats, autoregressive_generate, speculative_generate

    greedy, common = SamplingParams(), {"eos_ids": eos, "vocab_size": vocab}
    runs = {name: {"tokens": [], "seconds": [], "stats": DecodeStats(), "equal": 0} for name in ["plain", *built]}

    def timed(name: str, prompt: list[int], reference: list[int]) -> None:
        started = time.perf_counter()
        if name == "plain":
            (out,) = autoregressive_generate(target, [prompt], max_new, greedy, **common)
        else:
            proposer, gamma = built[name]
            (out,), stats = speculative_generate(target, proposer, [prompt], max_new, gamma, greedy, **common)
            runs[name]["stats"].add(stats)
        runs[name]["seconds"].append(time.perf_counter() - started)
        runs[name]["tokens"].append(len(out))
        runs[name]["equal"] += out == reference

    for i, (prompt, reference) in enumerate(zip(prompts, decodes)):
        for name in ["plain", *built, "plain"]:
            timed(name, prompt, reference)
        print(f"prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    return runs


def summary(runs: dict, built: dict) -> list[dict]:
    """Per contender τ, speed-up and its interval against the plain decodes (both repeats), c, and who drafted."""
    from eval.timing import speedup_spread

    plain = runs["plain"]
    base_tokens = [a + b for a, b in zip(plain["tokens"][::2], plain["tokens"][1::2])]
    base_seconds = [a + b for a, b in zip(plain["seconds"][::2], plain["seconds"][1::2])]
    step = sum(base_seconds) / sum(base_tokens)  # one plain decoding step
    rows = []
    for name, (proposer, gamma) in built.items():
        run, stats = runs[name], runs[name]["stats"]
        spread = speedup_spread(run["tokens"], run["seconds"], base_tokens, base_seconds)
        speedup = (sum(run["tokens"]) / sum(run["seconds"])) / (sum(base_tokens) / sum(base_seconds))
        row = {
            "contender": name,
            "gamma": gamma,
            "tau": round(sum(run["tokens"]) / stats.target_forwards, 4),
            "speedup": round(speedup, 4),
            "interval": [round(spread["low"], 4), round(spread["high"], 4)],
            # a drafter forward ÷ a plain step (None: no forwards), and all drafting per step ÷ a plain step
            "c": round(stats.draft_seconds / stats.draft_forwards / step, 4) if stats.draft_forwards else None,
            "draft_cost_per_step": round(stats.draft_seconds / stats.target_forwards / step, 4),
            "draft_forwards_per_step": round(stats.draft_forwards / stats.target_forwards, 3),
            "lossless": run["equal"] == len(run["tokens"]),
        }
        if hasattr(proposer, "drafts_from"):
            row["drafts_from"] = dict(proposer.drafts_from)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eagle", required=True, help="an EAGLE-3 export (a main job's RUN/smollm2/drafter)")
    parser.add_argument("--retrieval", required=True, help="a retrieval export (RUN/smollm2_retrieval/drafter)")
    parser.add_argument("--data", required=True, help="the run's distilled data: no measured prompt may be in it")
    parser.add_argument("--target", default="package:smollm2-135m-instruct")
    parser.add_argument("--prompts", default="mt_bench+humaneval")
    parser.add_argument("--num-prompts", type=int, default=24, help="prompts decoded by the target (cached)")
    parser.add_argument("--timed-prompts", type=int, default=12, help="the first of them, measured")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=4, help="the retrieval drafter's γ (its card's)")
    parser.add_argument("--eagle-gamma", type=int, default=2, help="EAGLE-3's γ (its card's), alone and combined")
    parser.add_argument("--min-match", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--out", default="bench_out/retrieval", help="where the target's decodes are cached")
    args = parser.parse_args(argv)
    machine.announce()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_retrieval import held_out_decodes

    from distill.config import TargetConfig
    from distill.stage.shards import load_distilled
    from distill.targets.load import eos_token_ids, load_target, load_tokenizer

    torch.set_grad_enabled(False)
    target_cfg = TargetConfig(name_or_path=args.target)
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, torch.device("cpu"))
    prompts, decodes = held_out_decodes(args, target, tokenizer, load_distilled(args.data))
    prompts, decodes = prompts[: args.timed_prompts], decodes[: args.timed_prompts]
    vocab, eos = len(tokenizer), eos_token_ids(target, tokenizer)
    built = contenders(args, target, vocab)
    decode_all(target, built, prompts[:1], decodes[:1], args.max_new_tokens, eos, vocab)  # warm-up, untimed
    for proposer, _ in built.values():
        if hasattr(proposer, "drafts_from"):
            proposer.drafts_from = dict.fromkeys(proposer.drafts_from, 0)
    runs = decode_all(target, built, prompts, decodes, args.max_new_tokens, eos, vocab)
    rows = summary(runs, built)
    for row in rows:
        print(
            f"{row['contender']:20s} γ {row['gamma']}  τ {row['tau']:.3f}  speed-up {row['speedup']:.3f}× "
            f"({row['interval'][0]:.2f}–{row['interval'][1]:.2f}×)  drafting {row['draft_cost_per_step']:.3f} "
            f"of a plain step  lossless {row['lossless']}  "
            f"{row.get('drafts_from', '')}",
            file=sys.stderr,
        )
    plain = sum(runs["plain"]["tokens"]) / sum(runs["plain"]["seconds"])
    print(f"plain decoding: {plain:.1f} tokens/s", file=sys.stderr)
    result = {
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "plain_tokens_per_second": round(plain, 2),
    }
    result["rows"] = rows
    print(json.dumps(machine.with_machine(result)))
    return result


if __name__ == "__main__":
    main()
