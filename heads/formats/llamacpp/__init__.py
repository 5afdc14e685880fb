"""llama.cpp as a consumer: GGUF drafters `llama-server` loads as they are (`-md gguf/draft.gguf` with the
family's `--spec-type`), written by llama.cpp's own converter, and the card's llama-server command.

Its other nouns, one per module: programs.py (finding and building llama.cpp, running its converter), writer.py (a
GGUF written), tokenizer.py (the tokenizer check), target.py (a GGUF target's record).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

from heads.errors import HeadsError
from heads.formats import Consumer
from heads.formats.llamacpp.programs import missing
from heads.formats.llamacpp.target import local_dir
from heads.formats.llamacpp.writer import convert

ENGINE = "llamacpp"

SUBDIR = "gguf"

DRAFT_FILE = "draft.gguf"

STATIC_CACHE_FILE = "lookup-static.bin"  # `--spec-type ngram-cache -lcs FILE`: a static n-gram cache


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
