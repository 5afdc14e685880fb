"""Benchmark parallel drafters (PARD, P-EAGLE, DFlash) against sequential ones on the toy target.

Every exported drafter given is decoded on the same held-out prompts, greedy, interleaved per prompt
with our KV-cached autoregressive decoding (so machine noise hits every contender alike): at its γ,
and at γ = 1, whose drafting time is one drafted token — the block cost of a drafter is its drafting
time per step at γ divided by that (≈ γ for one forward per token, ≈ 1 for one forward per block).
Prints one JSON line: per drafter τ, α, speed-up, drafter forwards and milliseconds per step, block
cost, lossless prompts; and the issue's goals: P1 (the best parallel drafter's speed-up ≥ 2.0),
block cost ≤ 1.3 for each parallel drafter, τ(PARD) ≥ 0.9 τ(draft LM), τ(DFlash) ≥ τ(EAGLE-3).

    python scripts/bench_parallel.py --drafter pard=runs/toy_pard/<ts>/drafter@6 \
        --drafter draft_lm=runs/toy/<ts>/drafter@4 --drafter dflash=runs/toy_dflash/<ts>/drafter@7
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from eval import machine


def _contender(text: str) -> tuple[str, Path, int]:
    name, _, rest = text.partition("=")
    path, _, gamma = rest.partition("@")
    if not name or not path or not gamma.isdigit():
        raise argparse.ArgumentTypeError(f"--drafter {text!r}: use NAME=EXPORT_DIR@GAMMA, e.g. pard=runs/x/drafter@6")
    return name, Path(path), int(gamma)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", type=_contender, action="append", required=True, help="NAME=EXPORT_DIR@GAMMA")
    parser.add_argument("--target", default="toyworld:toy")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below

    from distill.config import TargetConfig
    from distill.prompts.read import load_conversations
    from distill.targets.load import eos_token_ids, load_target, load_tokenizer
    from distill.targets.toyworld import toyworld_prompts
    from eval.config import EvalConfig
    from eval.metrics import Tally, decode_figures
    from eval.prompts import prompt_ids
    from eval.proposers import load_proposer
    from eval.sampling import SamplingParams
    from eval.speculative import DecodeStats, autoregressive_generate, speculative_generate
    from heads.families import read_export

    torch.set_num_threads(args.threads)
    target_cfg = TargetConfig(name_or_path=args.target)
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, "cpu").eval()
    eos, vocab, greedy = eos_token_ids(target, tokenizer), len(tokenizer), SamplingParams()
    convs = load_conversations("toyworld", "heldout", toyworld_prompts(args.target, "heldout"))
    prompts = prompt_ids(convs, tokenizer, limit=args.num_prompts + 2)
    contenders = {}
    for name, path, gamma in args.drafter:
        proposer, kind = load_proposer(
            read_export(path), target, vocab, EvalConfig(num_speculative_tokens=gamma), "cpu"
        )
        contenders[name] = (proposer, kind, gamma)

    def spec(proposer, ids, gamma):
        out, stats = speculative_generate(
            target, proposer, [ids], args.max_new_tokens, gamma, greedy, eos_ids=eos, vocab_size=vocab
        )
        return out[0], stats

    ar, at_gamma, at_one = Tally(), {n: Tally() for n in contenders}, {n: Tally() for n in contenders}
    with torch.inference_mode():
        for i, ids in enumerate(prompts):
            timed = i >= 2  # two warm-up prompts
            t0, plain = time.perf_counter(), DecodeStats()  # its prefill timed apart, as eval times it
            expected = autoregressive_generate(
                target, [ids], args.max_new_tokens, greedy, eos_ids=eos, vocab_size=vocab, stats=plain
            )[0]
            if timed:
                ar.seconds, ar.tokens = ar.seconds + time.perf_counter() - t0, ar.tokens + len(expected)
                ar.stats.add(plain)
            for name, (proposer, _, gamma) in contenders.items():
                for tally, g in ((at_gamma[name], gamma), (at_one[name], 1)):
                    t0 = time.perf_counter()
                    out, stats = spec(proposer, ids, g)
                    if timed:
                        tally.seconds += time.perf_counter() - t0
                        tally.tokens += len(out)
                        tally.stats.add(stats)
                        tally.equal_rows += out == expected

    results = {}
    for name, (_, kind, gamma) in contenders.items():
        fig = decode_figures(at_gamma[name], ar, gamma, is_chain=True)
        one = decode_figures(at_one[name], ar, 1, is_chain=True)
        results[name] = {
            "kind": kind,
            "gamma": gamma,
            "tau": round(fig["tau"], 3),
            "alpha": round(fig["alpha"], 3),
            "speedup": round(fig["speedup"], 3),
            "draft_forwards_per_step": round(fig["draft_forwards_per_step"], 2),
            "ms_per_step": {k: round(v * 1e3, 2) for k, v in fig["seconds_per_step"].items()},
            "block_cost": round(fig["seconds_per_step"]["draft"] / one["seconds_per_step"]["draft"], 3),
            "cost_ratio": round(fig["cost_ratio"], 3),
            "lossless_prompts": at_gamma[name].equal_rows,
        }
    parallel = {n: r for n, r in results.items() if r["draft_forwards_per_step"] <= 1.0}
    tau_of = {r["kind"]: r["tau"] for r in results.values()}
    goals = {
        "P1_best_parallel_speedup": max((r["speedup"] for r in parallel.values()), default=None),
        "P1_met": any(r["speedup"] >= 2.0 and r["lossless_prompts"] == len(prompts) - 2 for r in parallel.values()),
        "block_cost_le_1.3": {n: r["block_cost"] <= 1.3 for n, r in parallel.items()},
    }
    if "pard" in tau_of and "draft_lm" in tau_of:
        goals["pard_tau_over_draft_lm"] = round(tau_of["pard"] / tau_of["draft_lm"], 3)
    if "dflash" in tau_of and "eagle3" in tau_of:
        goals["dflash_tau_over_eagle3"] = round(tau_of["dflash"] / tau_of["eagle3"], 3)
    print(
        json.dumps(
            machine.with_machine(
                {
                    "drafters": results,
                    "goals": goals,
                    "ms_per_autoregressive_token": round(ar.seconds / ar.tokens * 1e3, 2),
                    "prompts": len(prompts) - 2,
                    "max_new_tokens": args.max_new_tokens,
                    "threads": args.threads,
                }
            )
        )
    )


if __name__ == "__main__":
    main()
