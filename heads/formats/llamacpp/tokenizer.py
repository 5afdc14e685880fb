"""The tokenizer check: the converter recognizes a BPE tokenizer by hashing its ids on a probe text and refuses any it
does not know, such as one trained for a new model. drafthub then declares the pre-tokenizer only where the
tokenizer's own definition is exactly one llama.cpp implements (GPT-2's byte-level regex, no normalizer), and checks
the declaration: llama.cpp's ids must equal transformers' on a sample, or the export is refused in one line."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from heads.errors import HeadsError
from heads.formats.llamacpp import programs
from heads.formats.llamacpp.programs import BUILD_HINT, tool

GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}

# what the tokenizer check tokenizes both ways: whitespace runs, digits, contractions, code, non-Latin scripts
TOKENIZER_SAMPLE = (
    "Hello world! It's 2026, and we've been told he'd said 'RE you sure?'",
    "def add(a, b):\n    return a + b\n\n\n\tif x  ==  3.14159:\n        print(f'{x!r}', re.sub(r'[ \\t]+', ' ', s))\n",
    "  leading spaces,   runs of   spaces\n\n\nand newlines \r\n numbers 1 22 333 4444 55555 1234567",
    "Ünïcödé — naïve café, 日本語のテキスト, нещо на Български, emoji 🚀🦙 and ----====....!!!???",
    '<|im_start|> looks special but is text here; </s> too. JSON: {"k": [1, 2, 3], "v": null}',
)


def declared_pre_tokenizer(tokenizer_dir: Path) -> Optional[str]:
    """'gpt-2' when tokenizer.json pre-tokenizes exactly as GPT-2 (byte-level, its regex, no prefix space, no
    normalizer): llama.cpp's `gpt-2` pre-type implements exactly that. None: nothing drafthub may declare."""
    file = Path(tokenizer_dir) / "tokenizer.json"
    if not file.is_file():
        return None
    spec = json.loads(file.read_text())
    pre = spec.get("pre_tokenizer") or {}
    same = all(pre.get(k) == v for k, v in GPT2_PRE_TOKENIZER.items())
    return "gpt-2" if same and spec.get("normalizer") is None and spec["model"].get("type") == "BPE" else None


def llama_cpp_ids(vocab_gguf: Path, text: str, *, parse_special: bool = False) -> list[int]:
    """llama.cpp's token ids for `text` (llama-tokenize, no BOS; special tokens parsed only when asked)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        argv = [
            str(tool("llama-tokenize")),
            "-m",
            str(vocab_gguf),
            "-f",
            f.name,
            "--ids",
            "--no-bos",
            "--no-escape",
            "--log-disable",
        ]
        done = subprocess.run(argv + ([] if parse_special else ["--no-parse-special"]), capture_output=True)
    if done.returncode != 0:
        raise HeadsError(f"llama-tokenize failed on {vocab_gguf}: {done.stderr.decode(errors='replace')[-300:]}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def check_tokenizer(tokenizer_dir: Path, pre: str, texts: tuple[str, ...] = TOKENIZER_SAMPLE) -> None:
    """The declared pre-tokenizer holds: llama.cpp's ids equal transformers' on every sample text (checked once
    per tokenizer file, pre-tokenizer and sample in a process)."""
    file = Path(tokenizer_dir) / "tokenizer.json"
    _check_tokenizer(Path(tokenizer_dir), pre, texts, hashlib.sha256(file.read_bytes()).hexdigest())


@functools.lru_cache(maxsize=16)
def _check_tokenizer(tokenizer_dir: Path, pre: str, texts: tuple[str, ...], tokenizer_sha256: str) -> None:
    from transformers import AutoTokenizer

    if tool("llama-tokenize") is None:
        raise HeadsError(
            f"drafthub declared llama.cpp's {pre!r} pre-tokenizer for {tokenizer_dir} and cannot check it: "
            f"llama-tokenize is missing; {BUILD_HINT}"
        )
    reference = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "vocab.gguf"
        programs.run_converter(
            [str(tokenizer_dir), "--outfile", str(vocab), "--vocab-only"], pre, vocab, what=tokenizer_dir
        )
        for text in texts:
            if (
                at := _first_difference(reference.encode(text, add_special_tokens=False), llama_cpp_ids(vocab, text))
            ) is not None:
                raise HeadsError(
                    f"llama.cpp would tokenize differently from {tokenizer_dir}'s tokenizer (declared pre-tokenizer "
                    f"{pre!r}; first difference at token {at} of {text[:40]!r}); its GGUF would serve other ids: "
                    f"teach llama.cpp this tokenizer (convert_hf_to_gguf_update.py) or leave llamacpp out of "
                    "publish.engines"
                )


def _first_difference(ours: list[int], theirs: list[int]) -> Optional[int]:
    """The first position where two id lists differ (the shorter one's length if one extends the other); None: equal."""
    if ours == theirs:
        return None
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))


def check_gguf_tokenizer(tokenizer, gguf_file: Path, texts: tuple[str, ...] = TOKENIZER_SAMPLE) -> None:
    """The tokenizer transformers built from `gguf_file` gives llama.cpp's own ids on every sample text (special
    tokens parsed both ways, as a chat template's text is), so a drafter trained on its ids is served the same ids.
    Where llama-tokenize is not built there is nothing to check against: the caller records that."""
    for text in texts:
        theirs = llama_cpp_ids(gguf_file, text, parse_special=True)
        if (at := _first_difference(tokenizer.encode(text, add_special_tokens=False), theirs)) is not None:
            raise HeadsError(
                f"transformers reads the tokenizer of {gguf_file.name} differently from llama.cpp (first difference at "
                f"token {at} of {text[:40]!r}), so a drafter would learn ids llama-server never serves; give the "
                "model's Hugging Face directory (with its tokenizer.json) as target.name_or_path instead"
            )
