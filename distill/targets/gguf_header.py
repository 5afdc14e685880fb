"""What a GGUF's header says, read once and before anything else: the architecture, the tokenizer (its model, its
pre-tokenizer, its vocabulary, its special ids, its chat template), the tensor types and the transformers config.

Every refusal a file alone decides (not a GGUF, an architecture transformers does not map, a quantization it cannot
dequantize) comes from here, in one line and in seconds; `dry_run` plans from it and never dequantizes. gguf-py parses
the header in one pass (~8 s for a 262k-token vocabulary on a CPU, most of it the vocabulary's strings); the facts are
kept under $DRAFTHUB_CACHE/targets/ by the file's digest, so later runs read them at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Optional

from distill.errors import DistillError
from distill.inputs import file_digest
from heads.cache import cache_root

FORMAT = 2  # bump when the facts kept change: older records are read again from the file
# the roles the file gives token ids: tokenizer.ggml.<key>_token_id (llama.cpp spells "seperator")
SPECIAL_IDS = {
    "bos": "bos",
    "eos": "eos",
    "eot": "eot",
    "eom": "eom",
    "pad": "padding",
    "unknown": "unknown",
    "sep": "seperator",
    "mask": "mask",
}


@dataclasses.dataclass(frozen=True)
class GgufHeader:
    architecture: str
    name: Optional[str]
    tokenizer_model: Optional[str]  # llama.cpp's tokenizer kind: gpt2 (byte-level BPE), llama (SentencePiece), …
    pre_tokenizer: Optional[str]
    vocabulary: int
    chat_template: Optional[str]
    special_ids: dict  # {"bos": 2, "eos": 1, …}: the ids the file gives a role
    tensor_types: list  # ["F32", "Q4_K", …]
    parameters: int  # elements over every tensor
    config: dict  # the transformers config dict (what AutoConfig.from_pretrained(gguf_file=…) builds)

    def model_config(self):
        """The transformers config, built from the kept dict (no file read)."""
        from transformers import AutoConfig

        fields = dict(self.config)
        return AutoConfig.for_model(fields.pop("model_type"), **fields)


def read_header(file: Path) -> GgufHeader:
    """The header of `file` (a .gguf), from the kept record when its digest has one; DistillError in one line when
    transformers could not load the file."""
    record = cache_root() / "targets" / f"gguf-{file_digest(file)}.header.json"
    try:
        kept = json.loads(record.read_text())
        if kept.pop("format", None) == FORMAT:
            return GgufHeader(**kept)
    except (OSError, ValueError, TypeError):
        pass
    header = _parse(file)
    try:
        from heads.formats.staging import atomic_write_text

        record.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(record, json.dumps({"format": FORMAT, **dataclasses.asdict(header)}, default=str))
    except OSError:
        pass  # a read-only cache only costs a parse next time
    return header


def _parse(file: Path) -> GgufHeader:
    import gguf

    try:
        reader = gguf.GGUFReader(file)
        architecture = _text(reader, "general.architecture")
    except Exception as e:  # a truncated or foreign file: the reader's own error, in one line
        why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        raise DistillError(
            f"target {file} is not a readable GGUF file ({why}); download it again or give the model's Hugging Face "
            "directory"
        ) from None
    config = _transformers_config(file, reader, architecture)
    tokens = reader.get_field("tokenizer.ggml.tokens")
    special = {
        role: int(field.contents())
        for role, key in SPECIAL_IDS.items()
        if (field := reader.get_field(f"tokenizer.ggml.{key}_token_id")) is not None
    }
    return GgufHeader(
        architecture=architecture,
        name=_text(reader, "general.name"),
        tokenizer_model=_text(reader, "tokenizer.ggml.model"),
        pre_tokenizer=_text(reader, "tokenizer.ggml.pre"),
        vocabulary=len(tokens.data) if tokens else 0,
        chat_template=_text(reader, "tokenizer.chat_template") or None,
        special_ids=special,
        tensor_types=_check_quantizations(file, reader),
        parameters=sum(math.prod(int(d) for d in t.shape) for t in reader.tensors),
        config=config,
    )


def _transformers_config(file: Path, reader, architecture: str) -> dict:
    """transformers' own mapping of the header to a config, on the reader already parsed (its loader would parse the
    file again, as long again)."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    parse = gguf.GGUFReader
    gguf.GGUFReader = lambda path, *args, **kwargs: reader if Path(path) == file else parse(path, *args, **kwargs)
    try:
        return load_gguf_checkpoint(str(file), return_tensors=False)["config"]
    except ValueError as e:
        raise DistillError(
            f"target {file.name} is a GGUF of architecture {architecture!r}, which transformers cannot load "
            f"({str(e).splitlines()[0]}); give the model's Hugging Face directory instead"
        ) from None
    finally:
        gguf.GGUFReader = parse


def _check_quantizations(file: Path, reader) -> list[str]:
    """Dequantize one row of a tensor of each type: exactly what loading does, so a type it cannot read fails here."""
    import gguf

    first = {}
    for tensor in reader.tensors:
        first.setdefault(tensor.tensor_type, tensor)
    for qtype, tensor in first.items():
        try:
            gguf.quants.dequantize(tensor.data[:1], qtype)
        except (NotImplementedError, ValueError, KeyError):
            raise DistillError(
                f"target {file.name} holds {qtype.name} tensors ({tensor.name}), which transformers cannot dequantize; "
                "requantize it to a type it reads (llama-quantize … Q8_0) or give the model's Hugging Face directory"
            ) from None
    return sorted(t.name for t in first)


def _text(reader, key: str) -> Optional[str]:
    field = reader.get_field(key)
    return None if field is None else str(field.contents())
