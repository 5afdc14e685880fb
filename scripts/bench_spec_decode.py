"""Benchmark the speculative decoding engine against our own and transformers' decoding.

On a causal-LM drafter's own target (the toy draft LM by default; any exported draft_lm or layer_skip drafter,
e.g. SmolLM2-135M-Instruct's), greedy, the same prompts and γ, it times
    (a) our KV-cached autoregressive decoding,
    (b) our speculative decoding,
    (c) transformers' generate(assistant_model=draft) with a fixed γ (constant schedule, no
        confidence early exit), and, for context, transformers' plain greedy generate and our
        speculative decoding on the other engine path,
interleaved per prompt, checks that (a), (b) and (c) produce identical tokens, and prints one
JSON line: tokens/s of each, speedup (b)/(a), ratio (b)/(c), measured α, τ, c, the predicted
speedups, where the time of one speculative step goes, and the compile time (spent before the
timed runs, excluded from throughput, as gpt-fast reports it).

(a) and (b) run on `--engine` (default static: pre-allocated cache, compiled fixed block widths;
eval/static_engine.py); the contender `ours_speculative_<other>` runs on the other path.

    python -m train recipe=toy                        # once: trains and publishes the toy drafter
    python scripts/bench_spec_decode.py [--drafter runs/toy/<ts>/drafter] [--gamma 4]
    python -m train drafter=draft_lm                  # SmolLM2's causal-LM drafter: measured on MT-Bench + HumanEval
    python scripts/bench_spec_decode.py --drafter runs/smollm2/<ts>/drafter

Prompts: a toy world's held-out split, any other target's benchmarks (`--prompts`, default mt_bench+humaneval,
taking turns; an MT-Bench second turn follows the target's own greedy answer to the first), never training prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from eval import machine


def _newest_toy_drafter() -> Path | None:
    found = sorted(Path("runs/toy").glob("*/drafter/drafthub.json"))
    return found[-1].parent if found else None


def _prompts(tokenizer, target, target_name: str, args, count: int, eos: int) -> list[list[int]]:
    """Templated as the eval stage templates them: a toy world's held-out split, else the benchmarks `--prompts`."""
    from distill.prompts.read import load_conversations, read_prompts
    from distill.targets.toyworld import toyworld_prompts
    from eval.config import EvalConfig
    from eval.prompts import prompt_ids, target_answers

    if target_name.startswith("toyworld:"):
        convs = load_conversations("toyworld", "heldout", toyworld_prompts(target_name, "heldout"))
        return prompt_ids(convs, tokenizer, limit=count)
    convs = read_prompts(args.prompts, None).across_categories().conversations
    first_turns = EvalConfig(temperature=0, max_new_tokens=args.max_new_tokens)
    answer = target_answers(target, first_turns, eos_ids={eos}, vocab_size=len(tokenizer))
    return prompt_ids(convs, tokenizer, limit=count, answer=answer)


def _hf_generate(target, ids: list[int], max_new_tokens: int, eos_id: int, pad_id: int, assistant=None) -> list[int]:
    out = target.generate(
        torch.tensor([ids]),
        assistant_model=assistant,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return out[0, len(ids) :].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--drafter", type=Path, default=None, help="exported toy draft LM (default: newest runs/toy/*/drafter)"
    )
    parser.add_argument(
        "--gamma", type=int, default=4, help="num_speculative_tokens, the same for ours and transformers'"
    )
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument(
        "--prompts", default="mt_bench+humaneval", help="benchmarks for a target that is not a toy world"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--engine", choices=["static", "dynamic"], default="static", help="our engine path for (a), (b)"
    )
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below

    from transformers import AutoModelForCausalLM

    from distill.config import TargetConfig
    from distill.targets.load import load_target, load_tokenizer
    from eval.metrics import Tally, decode_figures
    from eval.proposers.draft_lm import DraftLMProposer
    from eval.sampling import SamplingParams
    from eval.speculative import DecodeStats, autoregressive_generate, speculative_generate
    from eval.static_engine import DYNAMIC, choose_engine

    drafter = args.drafter or _newest_toy_drafter()
    if drafter is None or not (drafter / "drafthub.json").exists():
        sys.exit(
            "error: no exported toy drafter found; run `python -m train` first (about 10 min) or pass --drafter DIR"
        )
    torch.set_num_threads(args.threads)
    recorded = json.loads((drafter / "drafthub.json").read_text())["target"]
    target_cfg = TargetConfig(**{k: v for k, v in recorded.items() if k in TargetConfig.__dataclass_fields__})
    target_name = target_cfg.name_or_path
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg)
    draft = AutoModelForCausalLM.from_pretrained(drafter, use_safetensors=True).eval()
    # transformers' assisted generation at a fixed γ: no schedule, no confidence early exit.
    draft.generation_config.num_assistant_tokens = args.gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0

    eos, pad, vocab = tokenizer.eos_token_id, tokenizer.pad_token_id, len(tokenizer)
    greedy = SamplingParams()
    prompts = _prompts(tokenizer, target, target_name, args, args.num_prompts + 2, eos)
    proposer, other = DraftLMProposer(draft, vocab), DraftLMProposer(draft, vocab)
    engine = choose_engine(
        args.engine,
        target,
        proposer,
        tree=None,
        batch_size=1,
        max_len=max(map(len, prompts)) + args.max_new_tokens + 2 * (args.gamma + 1),
        widths=(1, args.gamma + 1),
    )
    decode_tokens = len(prompts) * args.max_new_tokens * 4  # ours twice, transformers' twice
    engine = engine.settle(target, decode_tokens=decode_tokens)  # auto on a CPU: the path measured faster
    other_engine = DYNAMIC
    if engine.static:
        engine.static_model(target)
        proposer.use_engine(engine)
        engine.precompile()
    else:  # the contender: the static path
        other_engine = choose_engine(
            "static", target, other, tree=None, batch_size=1, max_len=engine.max_len or 1024, widths=(1, args.gamma + 1)
        )
        other_engine.static_model(target)
        other.use_engine(other_engine)
        other_engine.precompile()

    def ours(prop, eng):
        def run(ids):
            out, stats = speculative_generate(
                target,
                prop,
                [ids],
                args.max_new_tokens,
                args.gamma,
                greedy,
                eos_ids={eos},
                vocab_size=vocab,
                engine=eng,
            )
            return out[0], stats

        return run

    def plain(ids):  # its prefill timed apart, as eval times it
        stats = DecodeStats()
        out = autoregressive_generate(
            target, [ids], args.max_new_tokens, greedy, eos_ids={eos}, vocab_size=vocab, engine=engine, stats=stats
        )
        return out[0], stats

    runs = {
        "ours_autoregressive": plain,
        "ours_speculative": ours(proposer, engine),
        "hf_assisted": lambda ids: (_hf_generate(target, ids, args.max_new_tokens, eos, pad, draft), None),
        "hf_autoregressive": lambda ids: (_hf_generate(target, ids, args.max_new_tokens, eos, pad), None),
        f"ours_speculative_{other_engine.name}": lambda ids: (ours(other, other_engine)(ids)[0], None),
    }
    with torch.inference_mode():
        for ids in prompts[:2]:  # warm-up, untimed
            for run in runs.values():
                run(ids)
        tallies = {name: Tally() for name in runs}
        identical = True
        for ids in prompts[2:]:  # interleaved: machine noise hits every contender alike
            outputs = {}
            for name, run in runs.items():
                t0 = time.perf_counter()
                outputs[name], stats = run(ids)
                tallies[name].seconds += time.perf_counter() - t0
                tallies[name].tokens += len(outputs[name])
                if stats is not None:
                    tallies[name].stats.add(stats)
            identical &= outputs["ours_autoregressive"] == outputs["ours_speculative"] == outputs["hf_assisted"]

    tps = {k: t.tokens / t.seconds for k, t in tallies.items()}
    fig = decode_figures(tallies["ours_speculative"], tallies["ours_autoregressive"], args.gamma, is_chain=True)
    per_step = fig["seconds_per_step"]
    print(
        json.dumps(
            machine.with_machine(
                {
                    "tokens_per_second": {k: round(v, 1) for k, v in tps.items()},
                    "speedup_b_over_a": round(fig["speedup"], 3),
                    "ratio_b_over_c": round(tps["ours_speculative"] / tps["hf_assisted"], 3),
                    "alpha": round(fig["alpha"], 3),
                    "tau": round(fig["tau"], 3),
                    "cost_ratio": round(fig["cost_ratio"], 3),
                    "predicted_speedup": round(fig["predicted_speedup"], 3),
                    "speedup_over_predicted": round(fig["speedup"] / fig["predicted_speedup"], 3),
                    "predicted_speedup_from_tau": round(fig["predicted_speedup_from_tau"], 3),
                    "identical_tokens": identical,
                    "ms_per_step": {
                        "draft": round(per_step["draft"] * 1e3, 2),
                        "target_verify_forward": round(per_step["target_forward"] * 1e3, 2),
                        "accept_and_cache": round(per_step["verify_and_cache"] * 1e3, 2),
                        "prefill": round(per_step["prefill"] * 1e3, 2),
                        "other": round(per_step["other"] * 1e3, 2),
                    },
                    "ms_per_autoregressive_token": round(
                        tallies["ours_autoregressive"].seconds / tallies["ours_autoregressive"].tokens * 1e3, 2
                    ),
                    "gamma": args.gamma,
                    "engine": engine.describe(),
                    "prompts": len(prompts) - 2,
                    "max_new_tokens": args.max_new_tokens,
                    "threads": args.threads,
                }
            )
        )
    )


if __name__ == "__main__":
    main()
