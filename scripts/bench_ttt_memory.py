"""How EAGLE-3's training-time test memory grows with the number of unrolled steps n.

    python scripts/bench_ttt_memory.py [--seq-len 512] [--batch 4] [--hidden 256]

Builds a drafter of the given width (random weights, no download), runs one training forward
over a (batch, seq-len) sample for n = 1, 4, 7 and prints one JSON line: bytes autograd keeps for
backward at each n, the growth per extra step, and what one (n·T)×(n·T) attention mask over the
unrolled sequence would take on its own (the construction this implementation avoids).
"""

from __future__ import annotations

import argparse
import json

import torch

from eval import machine
from heads.eagle import Eagle3Drafter, EagleArch
from heads.memory import saved_for_backward_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--draft-vocab", type=int, default=1024)
    args = ap.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below
    torch.manual_seed(0)
    H, T, B = args.hidden, args.seq_len, args.batch
    arch = EagleArch(
        hidden_size=H,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        intermediate_size=3 * H,
        vocab_size=args.vocab,
        draft_vocab_size=args.draft_vocab,
        target_hidden_size=H,
        layer_ids=[2, 4, 5],
    )
    drafter = Eagle3Drafter(arch)
    features = torch.randn(B, T, 3 * H)
    ids = torch.randint(0, args.vocab, (B, T))
    mask = torch.ones_like(ids)
    saved = {n: saved_for_backward_bytes(lambda n=n: drafter(features, ids, mask, n)) for n in (1, 4, 7)}
    print(
        json.dumps(
            machine.with_machine(
                {
                    "saved_bytes": saved,
                    "bytes_per_extra_step": [(saved[4] - saved[1]) / 3, (saved[7] - saved[4]) / 3],
                    "ratio_7_over_1": saved[7] / saved[1],
                    "unrolled_mask_bytes_n7": (7 * T) ** 2 * B * args.heads * 4,
                    "shape": {
                        "batch": B,
                        "seq_len": T,
                        "hidden": H,
                        "heads": args.heads,
                        "draft_vocab": args.draft_vocab,
                    },
                }
            )
        )
    )


if __name__ == "__main__":
    main()
