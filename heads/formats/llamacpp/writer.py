"""A drafter or a target written as GGUF by llama.cpp's own converter, its weights at their own precision, its
tokenizer's pre-tokenizer declared where llama.cpp implements it exactly, and checked (tokenizer.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from heads.errors import HeadsError
from heads.formats.llamacpp import programs, tokenizer

# safetensors dtype → the converter's --outtype: weights keep their precision (f32 stays f32)
OUTTYPES = {"F32": "f32", "BF16": "bf16", "F16": "f16"}


def outtype(model_dir: Path) -> str:
    """The converter's --outtype that keeps the checkpoint's own precision."""
    from safetensors import safe_open

    dtypes = set()
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            dtypes |= {f.get_slice(k).get_dtype() for k in f.keys()}
    floats = [OUTTYPES[d] for d in ("F32", "BF16", "F16") if d in dtypes]
    return floats[0] if floats else "auto"


def convert(model_dir: Path, out: Path, *, target_dir: Optional[Path] = None) -> Path:
    """`model_dir` (an HF directory) → the GGUF file `out`, by llama.cpp's converter; HeadsError in one line
    when it refuses. target_dir: the target whose tokenizer and shape a feature drafter (EAGLE-3, DFlash) takes."""
    if programs.missing_converter():
        raise HeadsError(programs.missing_converter())
    tokenizer_dir = Path(target_dir or model_dir)
    pre = tokenizer.declared_pre_tokenizer(tokenizer_dir) or ""
    args = [str(model_dir), "--outfile", str(out), "--outtype", outtype(model_dir)]
    args += ["--target-model-dir", str(target_dir)] if target_dir else []
    if pre:
        tokenizer.check_tokenizer(
            tokenizer_dir, pre
        )  # before the conversion: a refused tokenizer costs no model's write
    programs.run_converter(args, pre, out, what=model_dir)
    return out
