"""Serving consumers and the formats they load: one module per engine (vllm.py, sglang.py, llamacpp.py,
transformers.py), plus the formats several families share (speculators.py) and the staging every writer goes through.

A `Consumer` is what one engine needs from one family's export: where its layout lives, how to write it,
the engine's speculative config (what the served check starts the engine with), and the snippet the model
card prints. A family lists the consumers that serve it (heads/families/<kind>.py); adding an engine is one
module here plus one line in each family it serves.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}  # as users spell them in messages


@dataclass(frozen=True)
class Consumer:
    engine: str  # "vllm", "sglang", "transformers": what eval.serve and the card name
    # (target, γ, provenance) → the card's snippet for this engine; THIS_DIRECTORY stands for the export
    usage: Callable[[str, int, dict], str]
    # (export dir, γ, settings) → the engine's speculative config; None = drafthub cannot start this engine
    # to check it here (the served check refuses it up front, naming `missing`)
    speculative_config: Optional[Callable[..., dict]] = None
    subdir: Optional[str] = None  # where its layout lives in the export; None = the export's root
    write: Optional[Callable[[Any, Path], None]] = None  # (export job, its subdir) → its own layout
    # () → why this engine cannot serve the family on this machine (a missing package), or None
    missing: Callable[[], Optional[str]] = lambda: None
    # export directory → context manager the served check starts the engine inside (a family's workaround
    # for a known engine bug, e.g. DFlash's CPU k_norm on vLLM); nullcontext = none
    patch: Callable[[Path], AbstractContextManager] = lambda export_dir: nullcontext()
    # True: the drafter drafts from earlier requests' outputs (suffix decoding's global tree), so the served
    # check sends the prompts one at a time, in eval order, as drafthub's batch-1 engine decodes them
    in_order: bool = False
    # True: its layout is written only when asked for (ExportJob.engines: publish.engines, or eval.serve naming
    # it), because writing it needs a tool installed apart (llama.cpp's converter) or costs a conversion
    optional: bool = False
    # the engine drafts by another rule than drafthub's engine (stated here): its τ is reported beside ours, only its
    # outputs are judged (e.g. llama.cpp's ngram-simple takes the latest match of one n-gram size)
    rule_difference: Optional[str] = None
    # (drafter settings, target text config) → why this engine cannot serve a drafter trained with these settings
    # (e.g. llama.cpp and a fused last layer), known before any data is made; None = nothing to refuse
    refuse_settings: Callable[[Any, Any], Optional[str]] = lambda settings, target_config: None

    @property
    def checked(self) -> bool:
        """drafthub can start this engine and compare it with its own (eval.serve=<engine>)."""
        return self.speculative_config is not None


def python_literal(value: Any) -> str:
    """`value` as Python source with double-quoted strings: the snippet a user pastes runs as shown."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
