"""Convert Medusa heads saved by FasterDecoding/Medusa into drafthub's Medusa format (what vLLM serves as is).

    python scripts/convert_medusa.py SRC DST [--target NAME_OR_PATH]

SRC: a Medusa-1 directory (config.json + medusa_lm_head.safetensors or .pt), a head-only "medusa2" one
(no per-head lm_head: --target is required, its lm_head is copied into every head), or a Medusa-2 full
model (medusa_head.* tensors beside the fine-tuned base; that model is the target). With --target the
heads' sizes are checked against it. DST is written whole or not at all; then evaluate it with
`python -m eval drafter_dir=DST target_path=TARGET prompts=… record=true` and publish it like any drafter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from distill.config import TargetConfig  # noqa: E402
from distill.errors import DistillError  # noqa: E402
from distill.targets import resolve_target  # noqa: E402
from distill.targets.heads import load_target_heads  # noqa: E402
from heads.convert.medusa_original import convert_original_medusa  # noqa: E402
from heads.errors import HeadsError  # noqa: E402
from heads.formats.staging import staged_directory  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="the FasterDecoding/Medusa checkpoint directory")
    ap.add_argument("dst", type=Path, help="where the converted heads go (must not exist)")
    ap.add_argument("--target", help="the target (HF directory or Hub id): its lm_head, and a size check")
    args = ap.parse_args(argv)
    try:
        if not (args.src / "config.json").is_file():
            raise HeadsError(f"{args.src} has no config.json; pass a FasterDecoding/Medusa checkpoint directory")
        if args.dst.exists():
            raise HeadsError(f"{args.dst} exists; pass a new directory (nothing is overwritten)")
        lm_head = None
        if args.target:
            heads = load_target_heads(TargetConfig(name_or_path=resolve_target(args.target)))
            lm_head = heads.get_output_embeddings().weight.detach()
        medusa = convert_original_medusa(args.src, lm_head)
        with staged_directory(args.dst) as tmp:
            medusa.save_pretrained(tmp)
    except (DistillError, HeadsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{args.dst}: {medusa.num_heads} Medusa heads × {medusa.num_layers} layers (H {medusa.hidden_size}, "
        f"V {medusa.vocab_size}), vLLM's Medusa format"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
