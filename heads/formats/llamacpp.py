"""llama.cpp as a consumer: GGUF drafters `llama-server` loads as they are (`-md gguf/draft.gguf` with the
family's `--spec-type`), written by llama.cpp's own converter, and the card's llama-server command.

llama.cpp is found, never vendored: `llama-server` on PATH (or `$DRAFTHUB_LLAMA_SERVER`), else the build
`scripts/build_llamacpp.py` leaves under `$DRAFTHUB_CACHE/llamacpp/<version>/` from the pinned source package
(llama-cpp-python's sdist carries the whole llama.cpp tree: the converter, the server, llama-tokenize).

The converter recognizes a BPE tokenizer by hashing its ids on a probe text and refuses any it does not know,
such as one trained for a new model. drafthub then declares the pre-tokenizer only where the tokenizer's own
definition is exactly one llama.cpp implements (GPT-2's byte-level regex, no normalizer), and checks the
declaration: llama.cpp's ids must equal transformers' on a sample, or the export is refused in one line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

from heads.cache import cache_root, cpu_key
from heads.errors import HeadsError
from heads.formats import Consumer

ENGINE = "llamacpp"
SUBDIR = "gguf"
DRAFT_FILE = "draft.gguf"
STATIC_CACHE_FILE = "lookup-static.bin"  # `--spec-type ngram-cache -lcs FILE`: a static n-gram cache
GGUF_SOURCE = "gguf_source.json"  # in a target directory dequantized from a GGUF file: that file, its size and digest
PACKAGE, VERSION = "llama-cpp-python", "0.3.36"  # its sdist vendors llama.cpp at commit 0c1e57098 (MIT)
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # checked after each download
BUILD_HINT = "build it once with `python scripts/build_llamacpp.py` (~20 min on 2 cores) or put llama-server on PATH"
# safetensors dtype → the converter's --outtype: weights keep their precision (f32 stays f32)
OUTTYPES = {"F32": "f32", "BF16": "bf16", "F16": "f16"}
GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
# what the tokenizer check tokenizes both ways: whitespace runs, digits, contractions, code, non-Latin scripts
TOKENIZER_SAMPLE = (
    "Hello world! It's 2026, and we've been told he'd said 'RE you sure?'",
    "def add(a, b):\n    return a + b\n\n\n\tif x  ==  3.14159:\n        print(f'{x!r}', re.sub(r'[ \\t]+', ' ', s))\n",
    "  leading spaces,   runs of   spaces\n\n\nand newlines \r\n numbers 1 22 333 4444 55555 1234567",
    "Ünïcödé — naïve café, 日本語のテキスト, нещо на Български, emoji 🚀🦙 and ----====....!!!???",
    '<|im_start|> looks special but is text here; </s> too. JSON: {"k": [1, 2, 3], "v": null}',
)


def home() -> Path:
    """Where the pinned llama.cpp is built: `$DRAFTHUB_LLAMACPP`, else under drafthub's cache, keyed by the version,
    the source package's digest and the CPU class, so a cache shared between machines never serves a foreign build."""
    if os.environ.get("DRAFTHUB_LLAMACPP"):
        return Path(os.environ["DRAFTHUB_LLAMACPP"])
    return cache_root() / "llamacpp" / f"{VERSION}-{SDIST_SHA256[:12]}-cpu{cpu_key()}"


def source_dir() -> Path:
    return home() / "llama.cpp"


def converter() -> Optional[Path]:
    script = source_dir() / "convert_hf_to_gguf.py"
    return script if script.is_file() else None


def tool(name: str) -> Optional[Path]:
    """A llama.cpp program: `$DRAFTHUB_LLAMA_SERVER` for the server, PATH, then the pinned build."""
    if name == "llama-server" and os.environ.get("DRAFTHUB_LLAMA_SERVER"):
        return Path(os.environ["DRAFTHUB_LLAMA_SERVER"])
    found = shutil.which(name)
    built = home() / "build" / "bin" / name
    return Path(found) if found else (built if built.is_file() else None)


def missing_converter() -> Optional[str]:
    """Why no GGUF can be written here. A llama-server on PATH brings no converter: only the pinned source does."""
    if converter() is None:
        return (
            f"llama.cpp's converter (convert_hf_to_gguf.py) is not in {source_dir()}; unpack the pinned llama.cpp "
            "source with it (and build the server) once with `python scripts/build_llamacpp.py` (~20 min on 2 cores), "
            "or point DRAFTHUB_LLAMACPP at a directory holding such a build"
        )
    return None


def missing() -> Optional[str]:
    """Why drafthub cannot write and serve GGUF exports here (one line), or None."""
    if missing_converter():
        return missing_converter()
    for name in ("llama-server", "llama-tokenize"):
        if tool(name) is None:
            return f"{name} is neither on PATH nor in {home() / 'build' / 'bin'}; {BUILD_HINT}"
    return None


def outtype(model_dir: Path) -> str:
    """The converter's --outtype that keeps the checkpoint's own precision."""
    from safetensors import safe_open

    dtypes = set()
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            dtypes |= {f.get_slice(k).get_dtype() for k in f.keys()}
    floats = [OUTTYPES[d] for d in ("F32", "BF16", "F16") if d in dtypes]
    return floats[0] if floats else "auto"


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


# Runs llama.cpp's converter as llama.cpp ships it; with a declared pre-tokenizer, only a tokenizer the
# converter does not recognize gets the declaration (a recognized one keeps llama.cpp's own choice).
_RUNNER = """
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [src, src + "/gguf-py"]
if pre:
    from conversion.base import TextModel
    recognized = TextModel.get_vocab_base_pre
    def get_vocab_base_pre(self, tokenizer):
        try:
            return recognized(self, tokenizer)
        except NotImplementedError:
            return pre
    TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(model_dir: Path, out: Path, *, target_dir: Optional[Path] = None) -> Path:
    """`model_dir` (an HF directory) → the GGUF file `out`, by llama.cpp's converter; HeadsError in one line
    when it refuses. target_dir: the target whose tokenizer and shape a feature drafter (EAGLE-3, DFlash) takes."""
    if missing_converter():
        raise HeadsError(missing_converter())
    tokenizer_dir = Path(target_dir or model_dir)
    pre = declared_pre_tokenizer(tokenizer_dir) or ""
    args = [str(model_dir), "--outfile", str(out), "--outtype", outtype(model_dir)]
    args += ["--target-model-dir", str(target_dir)] if target_dir else []
    if pre:
        check_tokenizer(tokenizer_dir, pre)  # before the conversion: a refused tokenizer costs no model's write
    _run_converter(args, pre, out, what=model_dir)
    return out


def _run_converter(args: list[str], pre: str, out: Path, *, what) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(source_dir()), pre, *args], capture_output=True, text=True
    )
    if done.returncode != 0 or not out.is_file():
        out.unlink(missing_ok=True)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("INFO")]
        why = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "no message")
        raise HeadsError(f"llama.cpp's converter refused {what}: {why.strip()}")


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
        _run_converter([str(tokenizer_dir), "--outfile", str(vocab), "--vocab-only"], pre, vocab, what=tokenizer_dir)
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


def server_args(spec_type: str, gamma: int, extra: Callable[[dict, int], list[str]], settings: dict) -> list[str]:
    """llama-server's speculative flags: always γ drafted (no confidence cut-off), as drafthub's chains draft."""
    return ["--spec-type", spec_type, *extra(settings, gamma), "--spec-draft-n-max", str(gamma)] + [
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
    ]


def _fuses_last_layer(ids: list[int], layers: int) -> Optional[str]:
    if max(ids) >= layers:
        return (
            f"it fuses the target's last layer (drafter.layer_ids={ids} of {layers}), and llama.cpp's feature "
            f"drafters read only layer inputs; train it with layer ids below {layers}"
        )
    return None


# llama.cpp architectures whose graph hands a feature drafter (draft-eagle3, draft-dflash) the inputs of the target's
# layers (`res->t_layer_inp[il] = inpL;` in src/models/<arch>.cpp) in the pinned build. Any other target aborts on the
# first draft (GGML_ASSERT "layer input tensor is null", src/llama-graph.cpp): found on a Gemma 3 target, whose
# gemma3.cpp sets none (patched in, its EAGLE-3 served losslessly); no server flag avoids it.
FEATURE_TARGETS = frozenset(
    "llama llama-embed qwen3 qwen3moe qwen3next qwen35 qwen35moe qwen4exp gpt-oss minimax-m2 minimax-01 gemma4 "
    "mimo2 nanbeige muse-glimmer bailingmoe3 hunyuan_vl hunyuan-dense lfm2 lfm2moe nemotron_h nemotron_h_moe "
    "deepseek4".split()
)
_ARCH_OF_MODEL_TYPE = {"mistral": "llama"}  # transformers' model_type → llama.cpp's architecture where no rule maps it


def _architectures(model_type: str) -> set[str]:
    """The llama.cpp architecture names a transformers model_type may go by (qwen3_moe → qwen3moe, gpt_oss → gpt-oss,
    gemma3_text → gemma3)."""
    base = model_type.removesuffix("_text")
    return {_ARCH_OF_MODEL_TYPE.get(base, base), base.replace("_", ""), base.replace("_", "-")}


def _unfed_target(target_config) -> Optional[str]:
    """Why llama.cpp's feature drafters cannot draft for this target (its graph hands over no layer inputs), or None."""
    model_type = getattr(target_config, "model_type", None) or ""
    if _architectures(model_type) & FEATURE_TARGETS:
        return None
    return (
        f"its target ({model_type or 'this architecture'}) hands llama.cpp's feature drafters none of its layer inputs "
        "in the pinned build (llama-server aborts on the first draft); llama.cpp serves them beside Llama, Qwen3, "
        "gpt-oss, Gemma 4 and a few more"
    )


def _refuse_last_layer(drafter_class) -> Callable[[Any], Optional[str]]:
    """llama.cpp's feature drafters (draft-eagle3, draft-dflash, draft-dspark) read the target's layer *inputs*;
    the last layer's output (layer id N) is none of them. DFlash's then aborts on its first decode; EAGLE-3's reads
    a buffer a Llama target never writes and drafts on, accepted less often (measured on the micro target: served
    τ 5-10 % below ours, never an error). A drafter fusing id N is refused before converting."""

    def refuse(job) -> Optional[str]:
        target_config = json.loads((local_dir(job.verifier["name_or_path"]) / "config.json").read_text())
        text = target_config.get("text_config", target_config)
        if why := _unfed_target(SimpleNamespace(model_type=text.get("model_type", target_config.get("model_type")))):
            return why
        return _fuses_last_layer(
            list(drafter_class.from_pretrained(job.checkpoint).arch.layer_ids), text["num_hidden_layers"]
        )

    return refuse


def _last_layer_in_settings(settings, target_config) -> Optional[str]:
    """_refuse_last_layer from the recipe's drafter.layer_ids and the target's config, before any data is made
    (unset ids are the family's defaults, which stay below the last layer)."""
    if why := _unfed_target(target_config):
        return why
    ids = getattr(settings, "layer_ids", None)
    return None if not ids else _fuses_last_layer(list(ids), target_config.num_hidden_layers)


def consumer(
    spec_type: str,
    *,
    model: bool = True,
    feature_drafter: Optional[type] = None,
    extra: Callable[[dict, int], list[str]] = lambda settings, gamma: [],
    rule_difference: Optional[str] = None,
    static_cache: Optional[Callable[[Any, Path], None]] = None,
) -> Consumer:
    """llama.cpp serving a family with `--spec-type spec_type`: `model` = the export carries gguf/draft.gguf
    (`-md`); feature_drafter = the drafter class of a family that fuses the target's layers (EAGLE-3, DFlash): its
    conversion reads the target's config and tokenizer, and a drafter fusing the last layer is refused (in the
    recipe's settings before any data is made, in the checkpoint before converting); extra(settings, γ) = further
    flags from a training-free drafter's settings; static_cache(job, file) = writes gguf/lookup-static.bin, the
    static n-gram cache `-lcs` loads (a drafter built from the target's answers)."""
    refuse = _refuse_last_layer(feature_drafter) if feature_drafter else lambda job: None

    def write(job, out: Path) -> None:
        if static_cache is not None:
            out.mkdir()
            static_cache(job, out / STATIC_CACHE_FILE)
        if not model:
            return
        if why := refuse(job):
            raise HeadsError(f"llama.cpp cannot serve this drafter: {why}")
        out.mkdir()
        target_dir = local_dir(job.verifier["name_or_path"]) if feature_drafter else None
        convert(out.parent, out / DRAFT_FILE, target_dir=target_dir)

    def speculative_config(export_dir: str | Path, gamma: int, settings: Optional[dict] = None) -> dict:
        from heads.formats.vllm import read_settings

        settings = read_settings(export_dir) if settings is None else settings
        where = ["-md", str(Path(export_dir) / SUBDIR / DRAFT_FILE)] if model else []
        where += ["-lcs", str(Path(export_dir) / SUBDIR / STATIC_CACHE_FILE)] if static_cache else []
        args = where + server_args(spec_type, gamma, extra, settings)
        return {"method": spec_type, "args": args, "num_speculative_tokens": gamma}

    def usage(target: str, gamma: int, provenance: dict) -> str:
        flags = speculative_config("THIS_DIRECTORY", gamma, provenance.get("drafter_config") or {})["args"]
        lines = [
            f"TARGET_DIR=$(hf download {target})  # or the target's local directory",
            "python convert_hf_to_gguf.py $TARGET_DIR --outfile target.gguf",
        ]
        if model:  # the export's gguf/ when it was asked for (publish.engines=[llamacpp]); the same command otherwise
            reads_target = " --target-model-dir $TARGET_DIR" if feature_drafter else ""
            out = f"THIS_DIRECTORY/{SUBDIR}/{DRAFT_FILE}"
            lines.append(f"[ -f {out} ] || python convert_hf_to_gguf.py THIS_DIRECTORY{reads_target} --outfile {out}")
        if static_cache:
            cache = f"{SUBDIR}/{STATIC_CACHE_FILE}"
            lines.append(f"# {cache}: the store as llama.cpp's static n-gram cache (publish.engines=[llamacpp])")
        lines.append(f"llama-server -m target.gguf {' '.join(flags)}")
        return (
            "llama.cpp (`llama-server`; the target, and the drafter where this directory has no `gguf/`, converted by "
            "llama.cpp's own `convert_hf_to_gguf.py`):\n\n```bash\n" + "\n".join(lines) + "\n```"
        )

    return Consumer(
        ENGINE,
        usage=usage,
        speculative_config=speculative_config,
        subdir=SUBDIR if model or static_cache else None,
        write=write if model or static_cache else None,
        missing=missing,
        optional=True,
        rule_difference=rule_difference,
        refuse_settings=_last_layer_in_settings if feature_drafter else lambda settings, target_config: None,
    )
