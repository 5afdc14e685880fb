"""When does a toy target learn to copy from its context? Variants of a world's target, measured as they train.

Each setting is a JSON object of WorldConfig fields over --world's (e.g. {"lr": 5e-3, "warmup_steps": 200}) and a
"name". Every setting trains with the builder's own loop (distill/toyworld/target.py) on the builder's own data
and prints one JSON line per evaluation point: tokens seen, train loss, held-out loss at the world's context, and
per task kind the teacher-forced answer accuracy on held-out prompts — the share of the reference answer's tokens
the target predicts given the answer so far. A target that cannot copy stays near 0.25 on `edit`, whose answers
repeat most of the prompt; one that copies climbs past 0.6 (train/results/toy.md, "What makes a toy target copy").
After the last step, greedy answers to 16 prompts per kind show whether it copies when it decodes alone: the
reference's share reproduced, the share prompt lookup could draft, and the loop rate (as scripts/bench_toy_world.py).

Meant for a GPU (a 3,000-step setting takes minutes there; --workers settings train side by side on one device),
runs anywhere (--device cpu: about half a second a step for the chat world's target on 2 cores):

    python scripts/sweep_copy.py --world chat --settings sweep.json --device cuda --workers 10 --out runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
from bench_toy_world import degenerate, from_prompt, reproduced

from distill.device import native_bf16
from distill.toyworld import corpus, tasks
from distill.toyworld.build import training_data
from distill.toyworld.config import SIZES, WorldConfig
from distill.toyworld.target import build_target, heldout_loss, train_target

EVAL_PROMPTS = 48  # held-out prompts per task kind
GREEDY_PROMPTS, GREEDY_TOKENS = 16, 256  # greedy answers per task kind after the last step, and their length


def eval_prompts(cfg: WorldConfig, data, heldout_files) -> dict[str, list[tuple[list[int], int]]]:
    """Per task kind, (prompt + reference answer ids, where the answer starts) for held-out documents."""
    docs = tasks.documents(heldout_files, EVAL_PROMPTS * len(cfg.tasks), cfg.seed + 2, kinds=cfg.tasks, fits=data.fits)
    out: dict[str, list[tuple[list[int], int]]] = {kind: [] for kind in cfg.tasks}
    for kind, doc in docs:
        ids = data.tokenizer.apply_chat_template(doc, return_dict=True)["input_ids"]
        prompt = data.tokenizer.apply_chat_template(doc[:-1], add_generation_prompt=True, return_dict=True)
        out[kind].append((ids, len(prompt["input_ids"])))
    return out


@torch.no_grad()
def answer_accuracy(model, rows: list[tuple[list[int], int]], bf16: bool) -> float:
    """The share of answer tokens the model's argmax predicts given the prompt and the answer so far."""
    device = next(model.parameters()).device
    width = max(len(ids) for ids, _ in rows)
    x = torch.zeros(len(rows), width, dtype=torch.long)
    scored = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (ids, start) in enumerate(rows):
        x[i, : len(ids)] = torch.tensor(ids)
        scored[i, start : len(ids)] = True  # position t predicts token t: the answer's tokens, the end token included
    x, scored = x.to(device), scored.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=x).logits
    hit = logits[:, :-1].argmax(-1) == x[:, 1:]
    return round(hit[scored[:, 1:]].float().mean().item(), 4)


@torch.no_grad()
def greedy_figures(model, rows: list[tuple[list[int], int]], tokenizer) -> dict:
    """What greedy decoding does with the first GREEDY_PROMPTS prompts (scripts/bench_toy_world.py's figures):
    the reference answer's share it reproduces, the share of its tokens prompt lookup could draft, the loop rate."""
    device = next(model.parameters()).device
    rows = rows[:GREEDY_PROMPTS]
    width = max(start for _, start in rows)
    x = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(x)
    for i, (ids, start) in enumerate(rows):  # left padded, as generate expects
        x[i, width - start :], mask[i, width - start :] = torch.tensor(ids[:start]), 1
    out = model.generate(
        input_ids=x.to(device), attention_mask=mask.to(device), max_new_tokens=GREEDY_TOKENS, do_sample=False
    )[:, width:].tolist()
    answers = [a[: a.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in a else a for a in out]
    n = len(rows)
    return {
        "copy_rate": round(sum(reproduced(a, ids[start:-1]) for a, (ids, start) in zip(answers, rows)) / n, 3),
        "from_prompt": round(sum(from_prompt(a, ids[:start]) for a, (ids, start) in zip(answers, rows)) / n, 3),
        "loops": round(sum(degenerate(a) for a in answers) / n, 3),
    }


def run_setting(world: str, setting: dict, device: str, every: int, emit, greedy: bool = True) -> None:
    name, fields = setting["name"], {k: v for k, v in setting.items() if k != "name"}
    cfg = replace(SIZES[world], **fields)
    if not cfg.tasks:
        raise SystemExit(f"error: world {world!r} has no task kinds to measure copying on; use --world chat")
    train_files, heldout_files = corpus.list_sources()
    train_files = corpus.take_bytes(train_files, cfg.corpus_bytes)
    data = training_data(cfg, train_files, heldout_files)
    prompts = eval_prompts(cfg, data, heldout_files)
    model = build_target(cfg, data.tokenizer).to(device)
    held = data.heldout.to(device)
    bf16 = cfg.bf16 and native_bf16(device)  # as train_target trains it

    def on_eval(step: int, model, train_loss: float) -> None:
        record = {"setting": name, "step": step, "tokens": step * cfg.batch_size * cfg.seq_len}
        record |= {"train_loss": round(train_loss, 4), "heldout_loss": round(heldout_loss(model, held, cfg.seq_len), 4)}
        record |= {f"{kind}_accuracy": answer_accuracy(model, rows, bf16) for kind, rows in prompts.items()}
        if step == cfg.train_steps and greedy:
            record |= {f"{kind}_greedy": greedy_figures(model, rows, data.tokenizer) for kind, rows in prompts.items()}
        emit(record)

    code, chat = data.code.to(device), data.chat.to(device)
    train_target(model, cfg, code, chat, on_eval=on_eval, eval_every=every, chat_starts=data.chat_starts)


def _worker(rank: int, workers: int, args: argparse.Namespace, settings: list[dict]) -> None:
    torch.set_num_threads(max(1, torch.get_num_threads() // workers))
    out = Path(f"{args.out}.{rank}") if workers > 1 else args.out
    with out.open("w") as f:

        def emit(record: dict) -> None:
            f.write(json.dumps(record) + "\n")
            f.flush()
            print(json.dumps(record), flush=True)

        for setting in settings[rank::workers]:
            run_setting(args.world, setting, args.device, args.eval_every, emit, greedy=not args.no_greedy)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="chat", help="the toy world size whose target is varied (default: chat)")
    ap.add_argument("--settings", type=Path, required=True, help='a JSON list of {"name": ..., field: value}')
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=1, help="settings trained side by side (processes)")
    ap.add_argument("--eval-every", type=int, default=100, help="steps between evaluation points")
    ap.add_argument("--no-greedy", action="store_true", help="skip the greedy answers after the last step")
    ap.add_argument("--out", type=Path, default=Path("sweep_copy.jsonl"), help="JSON lines (one file per worker)")
    args = ap.parse_args(argv)
    if args.world not in SIZES:
        print(f"error: --world {args.world!r} is not a toy world size ({', '.join(SIZES)})", file=sys.stderr)
        return 2
    settings = json.loads(args.settings.read_text())
    fields = set(WorldConfig.__dataclass_fields__)
    for s in settings:
        unknown = set(s) - fields - {"name"}
        if "name" not in s or unknown:
            print(
                f"error: setting {s} needs a name and only WorldConfig fields (unknown: {sorted(unknown)})",
                file=sys.stderr,
            )
            return 2
    if args.workers == 1:
        _worker(0, 1, args, settings)
    else:
        torch.multiprocessing.start_processes(
            _worker, (args.workers, args, settings), nprocs=args.workers, start_method="spawn"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
