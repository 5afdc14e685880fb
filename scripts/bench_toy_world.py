"""How much the toy target behaves like a real LLM where speculation is decided: one JSON line of its figures.

For each toy world given (a size, built if needed, or a world directory, e.g. an older cached build), greedy
answers of up to --max-new-tokens to held-out prompts of each task kind (--prompts-from: the `chat` world's
workload splits), decoded with transformers' generate. Figures:
- heldout_loss: the build's held-out next-token loss (nats) at 128-token windows and at the world's context;
- copy rate on `edit` (and every kind): the share of the reference answer's tokens the greedy answer reproduces
  in order (difflib matching blocks over token ids) — the old world reproduced 2–7 % of a repeated block;
- from_prompt: the share of answer tokens that continue a 3-gram of the prompt (what prompt lookup can draft);
- degenerate-loop rate: answers whose last 64 tokens repeat with a period of at most 16 tokens;
- ended: answers that closed with the end token within the budget; build_seconds from the build.

    python scripts/bench_toy_world.py                         # the toy world, asked the chat world's prompts
    python scripts/bench_toy_world.py --world toy --world chat --world ~/.cache/drafthub/toyworld/chat-8ad7ae563d3c
"""

from __future__ import annotations

import argparse
import difflib
import json
import time
from pathlib import Path

import torch

from eval import machine

KINDS = ("completion", "edit", "long_context", "multi_turn")


def reproduced(answer: list[int], reference: list[int]) -> float:
    """The share of `reference` that `answer` reproduces in order."""
    blocks = difflib.SequenceMatcher(None, answer, reference, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / max(1, len(reference))


def from_prompt(answer: list[int], prompt: list[int], n: int = 3) -> float:
    """The share of answer tokens (after the first n) whose preceding n-gram and itself occur in the prompt."""
    grams = {tuple(prompt[i : i + n + 1]) for i in range(len(prompt) - n)}
    hits = [tuple(answer[i - n : i + 1]) in grams for i in range(n, len(answer))]
    return sum(hits) / max(1, len(hits))


def degenerate(answer: list[int], tail: int = 64, max_period: int = 16) -> bool:
    """The answer ends in a loop: its last `tail` tokens repeat with a period of at most `max_period`."""
    if len(answer) < tail:
        return False
    end = answer[-tail:]
    return any(all(end[i] == end[i + p] for i in range(tail - p)) for p in range(1, max_period + 1))


def world_figures(root: Path, prompts_root: Path, num: int, max_new: int) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root / "target")
    model = AutoModelForCausalLM.from_pretrained(root / "target").eval()
    context = model.config.max_position_embeddings
    info = json.loads((root / "world.json").read_text())
    out = {
        "world": root.name,
        "build_seconds": info.get("build_seconds"),
        "heldout_loss": info.get("heldout_loss"),
        # a world trained on 128-token windows measured its held-out loss there
        "heldout_loss_128": info.get(
            "heldout_loss_128", info["heldout_loss"] if info["config"]["seq_len"] == 128 else None
        ),
        "trained_context": info["config"]["seq_len"],
    }
    t0 = time.perf_counter()
    for kind in KINDS:
        rows = [json.loads(line) for line in (prompts_root / f"{kind}.jsonl").read_text().splitlines()][:num]
        copy, lookup, loops, ended = [], [], 0, 0
        for row in rows:
            messages = row["messages"][:-1]
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
            prompt = prompt[-(context - max_new) :]  # the old world's prompts: kept within its positions
            reference = tokenizer(row["messages"][-1]["content"], add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                ids = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False)[0, len(prompt) :]
            answer = ids.tolist()
            if answer and answer[-1] == tokenizer.eos_token_id:
                ended, answer = ended + 1, answer[:-1]
            copy.append(reproduced(answer, reference))
            lookup.append(from_prompt(answer, prompt))
            loops += degenerate(answer)
        out[kind] = {
            "prompts": len(rows),
            "copy_rate": round(sum(copy) / len(rows), 3),
            "from_prompt": round(sum(lookup) / len(rows), 3),
            "degenerate_rate": round(loops / len(rows), 3),
            "ended_rate": round(ended / len(rows), 3),
        }
    out["decode_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", action="append", help="a size (micro, toy) or a world directory; repeatable")
    parser.add_argument(
        "--prompts-from", default="chat", help="the world whose workload splits are asked (one with task kinds)"
    )
    parser.add_argument("--num-prompts", type=int, default=32, help="per task kind")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below

    from distill.toyworld import SIZES, load_world

    def root_of(name: str) -> Path:
        return load_world(name).root if name in SIZES else Path(name).expanduser()

    if args.prompts_from not in SIZES or not SIZES[args.prompts_from].tasks:
        with_kinds = [name for name, cfg in SIZES.items() if cfg.tasks]
        raise SystemExit(f"error: --prompts-from {args.prompts_from!r} has no task-kind splits; use {with_kinds}")
    prompts_world = load_world(args.prompts_from)
    result = {
        "max_new_tokens": args.max_new_tokens,
        "worlds": [
            world_figures(root_of(w), prompts_world.root / "prompts", args.num_prompts, args.max_new_tokens)
            for w in (args.world or ["toy"])
        ],
    }
    print(json.dumps(machine.with_machine(result)))


if __name__ == "__main__":
    main()
