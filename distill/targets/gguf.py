"""GGUF files as a target source: `target.name_or_path=path/model.gguf`, or a local directory or Hub repo with
`target.gguf_file=NAME` (as transformers' `from_pretrained(repo, gguf_file=…)`).

transformers reads the GGUF and dequantizes it to float; the weights are written once, as a plain HF directory
(safetensors, config, tokenizer, chat template), under $DRAFTHUB_CACHE/targets/gguf-<content digest>/, atomically.
Every engine then loads a directory as it loads any target. The directory records its GGUF (GGUF_SOURCE), so
llama-server serves the original quantized file, as a llama.cpp user runs it.

What transformers cannot read (an architecture it does not map, a quantization the gguf package cannot
dequantize, a file that is no GGUF) is refused in one line from the file's header, before any weights load. Where
llama.cpp is built, the tokenizer transformers builds from the file is checked against llama.cpp's own ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from distill.errors import DistillError
from distill.inputs import file_digest
from distill.targets.gguf_header import GgufHeader, read_header
from heads.cache import cache_root

SUFFIX = ".gguf"


def _smollm_pre_tokenizer():
    """SmolLM's (and StarCoder's): every digit alone, then GPT-2's byte-level split (its tokenizer.json's rule)."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )


# llama.cpp pre-tokenizer types (`tokenizer.ggml.pre`) that transformers' GGUF reader does not map: it would split
# text by GPT-2's rule instead ("  3" as " ", " 3" where SmolLM2 reads "  ", "3"); llama-tokenize checks the result
PRE_TOKENIZERS = {"smollm": _smollm_pre_tokenizer, "starcoder": _smollm_pre_tokenizer}


def claims(ref) -> bool:
    return bool(ref.gguf_file) or ref.name.endswith(SUFFIX)


def resolve(ref) -> str:
    file = gguf_path(ref)
    out = _directory(file)
    if _complete(out):
        _point_at(out, file)
    else:
        from filelock import FileLock

        header = read_header(file)  # refusals before any weights load
        out.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{out}.lock"):  # every rank of a launched run resolves the same file
            if not _complete(out):
                _dequantize(file, out, header)
    return str(out)


def built(ref) -> Optional[str]:
    file = gguf_path(ref, download=False)
    return str(_directory(file)) if file and _complete(_directory(file)) else None


def identity(ref) -> str:
    return file_digest(gguf_path(ref))


def config(ref):
    """The model config: from the dequantized directory once it is written, else from the file's header (read once,
    then kept: distill/targets/gguf_header.py)."""
    from transformers import AutoConfig

    if dequantized := built(ref):
        return AutoConfig.from_pretrained(dequantized)
    return read_header(gguf_path(ref)).model_config()


def declared(ref) -> dict:
    """What the header declares about the tokenizer (the chat template, the ids given a role); no weights read."""
    head = read_header(gguf_path(ref))
    return {"chat_template": head.chat_template, "special_ids": head.special_ids, "vocabulary": head.vocabulary}


def gguf_path(ref, *, download: bool = True) -> Optional[Path]:
    """The GGUF file on disk: the path itself, the file in a local directory, or the Hub repo's file (downloaded
    into the HF cache; only looked up there when not `download`, None when absent)."""
    if not ref.gguf_file:
        path = Path(ref.name).expanduser()
    elif Path(ref.name).expanduser().is_dir():
        path = Path(ref.name).expanduser() / ref.gguf_file
    else:
        path = _hub_file(ref, download)
        if path is None:
            return None
    if not path.is_file():
        raise DistillError(f"target GGUF {path} does not exist; give the path of a .gguf file (target.name_or_path)")
    return path.resolve()


def _hub_file(ref, download: bool) -> Optional[Path]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(ref.name, ref.gguf_file, revision=ref.revision, local_files_only=not download))
    except LocalEntryNotFoundError:
        if not download:
            return None
        raise DistillError(
            f"could not fetch {ref.gguf_file} from the Hub repo {ref.name!r} (offline, or no such file); check "
            "target.gguf_file, or download the file where the Hub is reachable and set target.name_or_path=<it>"
        ) from None
    except Exception as e:  # repo missing, gated, revision unknown: huggingface_hub's own errors
        raise DistillError(
            f"could not fetch {ref.gguf_file} from the Hub repo {ref.name!r} ({type(e).__name__}: "
            f"{str(e).splitlines()[0]}); check target.name_or_path, target.gguf_file and target.revision"
        ) from None


def _drop_tokens_past(tokenizer_json: Path, n_tokens: int) -> None:
    """Remove tokens with ids past the file's own vocabulary: transformers' byte-level builder adds GPT-2's default
    `<|endoftext|>` where a vocabulary lacks it (Llama-3's does), an id with no embedding that llama.cpp never has."""
    spec = json.loads(tokenizer_json.read_text())
    dropped = {t["content"] for t in spec.get("added_tokens", []) if n_tokens and t["id"] >= n_tokens}
    if not dropped:
        return
    kept = [t for t in spec["added_tokens"] if t["content"] not in dropped]
    tokenizer_json.write_text(json.dumps(spec | {"added_tokens": kept}, ensure_ascii=False))
    settings_file = tokenizer_json.with_name("tokenizer_config.json")
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({k: None if v in dropped else v for k, v in settings.items()}, indent=2))


def _directory(file: Path) -> Path:
    return cache_root() / "targets" / f"gguf-{file_digest(file)}"


def _complete(out: Path) -> bool:
    from heads.formats.llamacpp.target import GGUF_SOURCE

    return (out / GGUF_SOURCE).is_file()


def _point_at(out: Path, file: Path) -> None:
    """Record `file` as the directory's GGUF when another file with the same bytes was recorded before (a copy,
    a moved download): llama-server then serves a file that exists."""
    from heads.formats.llamacpp.target import GGUF_SOURCE
    from heads.formats.staging import atomic_write_text

    record = json.loads((out / GGUF_SOURCE).read_text())
    if record["gguf"] != str(file):
        atomic_write_text(out / GGUF_SOURCE, json.dumps(record | {"gguf": str(file)}, indent=1))


def _dequantize(file: Path, out: Path, header: GgufHeader) -> None:
    """Load `file` through transformers (dequantized to float32) and write it as a plain HF directory, whole or not
    at all; the record GGUF_SOURCE goes last, so a directory without it is never used."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from heads.errors import HeadsError
    from heads.formats import llamacpp
    from heads.formats.staging import atomic_write_text, staged_directory

    print(f"[target] dequantizing {file.name} into {out} (once)", flush=True)
    loaded = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    if header.pre_tokenizer in PRE_TOKENIZERS:
        tokenizer.backend_tokenizer.pre_tokenizer = PRE_TOKENIZERS[header.pre_tokenizer]()
    checked = llamacpp.programs.tool("llama-tokenize") is not None
    if checked:
        try:
            llamacpp.tokenizer.check_gguf_tokenizer(tokenizer, file)
        except HeadsError as e:
            raise DistillError(str(e)) from None
    config = loaded.config
    del config.quantization_config  # plain float weights now: transformers would refuse to save a "GGUF model"
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    with staged_directory(out) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _drop_tokens_past(tmp / "tokenizer.json", header.vocabulary)
        facts = {k: getattr(header, k) for k in ("architecture", "name", "pre_tokenizer", "vocabulary", "tensor_types")}
        record = {"gguf": str(file), "size": file.stat().st_size, "digest": file_digest(file), **facts}
        atomic_write_text(
            tmp / llamacpp.target.GGUF_SOURCE, json.dumps(record | {"tokenizer_checked": checked}, indent=1)
        )
