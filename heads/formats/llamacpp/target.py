"""A GGUF *target* as llama.cpp serves it: the file a target directory was dequantized from (its record), found
again by size and digest, or the directory converted back to GGUF once."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from heads.formats.llamacpp.programs import tool
from heads.formats.llamacpp.tokenizer import check_gguf_tokenizer
from heads.formats.llamacpp.writer import convert

GGUF_SOURCE = "gguf_source.json"  # in a target directory dequantized from a GGUF file: that file, its size and digest


def local_dir(target: str) -> Path:
    """The target's files on disk: its directory, or its snapshot in the Hugging Face cache (fetched if allowed)."""
    if Path(target).is_dir():
        return Path(target)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(target, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model"]))


def source_gguf(target_dir: Path) -> Optional[Path]:
    """The GGUF a target directory was dequantized from (its GGUF_SOURCE record), if it is still there: llama-server
    serves that file as its user would, quantized. None for any other directory."""
    record = Path(target_dir) / GGUF_SOURCE
    if not record.is_file():
        return None
    info = json.loads(record.read_text())
    original = Path(info["gguf"])
    if not original.is_file() or original.stat().st_size != info["size"]:
        print(
            f"[llamacpp] {original}, which {target_dir} was dequantized from, is gone or changed: llama-server "
            "serves the dequantized weights converted back instead",
            file=sys.stderr,
        )
        return None
    if not info.get("tokenizer_checked") and tool("llama-tokenize") is not None:
        from transformers import AutoTokenizer

        check_gguf_tokenizer(AutoTokenizer.from_pretrained(str(target_dir)), original)
    return original


def served_quantization(target_dir: Path) -> list[str]:
    """The quantized tensor types (Q4_1, Q8_0, …) of the original GGUF llama-server serves for `target_dir`; [] when
    it serves float weights (a conversion, or a float GGUF): then its numerics are ours."""
    if source_gguf(target_dir) is None:
        return []
    types = json.loads((Path(target_dir) / GGUF_SOURCE).read_text()).get("tensor_types", [])
    return [t for t in types if t not in ("F32", "F16", "BF16")]


def target_gguf(target_dir: Path, cache: Path) -> Path:
    """The GGUF llama-server serves as the target: the original of a target dequantized from one, else the target
    converted the same way as the drafter, once per target files (cached under `cache`, atomically)."""
    from heads.formats.fingerprint import served_files_hash

    if original := source_gguf(target_dir):
        return original
    out = cache / f"target-{served_files_hash(target_dir)[:16]}.gguf"
    if not out.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        convert(Path(target_dir), tmp)
        os.replace(tmp, out)
    return out
