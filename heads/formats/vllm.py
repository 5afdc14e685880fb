"""vLLM as a consumer: the speculative_config each family is served with, and the card's vLLM snippet.

One builder for every family: the served check starts vLLM with exactly the dict the card prints, so the
two cannot disagree. (DFlash's CPU workaround stays in dflash_vllm_cpu.py: vLLM imports that module as a
plugin in every engine process, so it holds nothing else.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from heads.formats import Consumer, python_literal

ENGINE = "vllm"


def read_settings(export_dir: str | Path) -> dict:
    """The export's config.json (the settings of a training-free drafter), {} where there is none."""
    file = Path(export_dir) / "config.json"
    return json.loads(file.read_text()) if file.is_file() else {}


def consumer(
    method: str,
    *,
    model: bool = True,
    extra: Callable[[dict], dict] = lambda settings: {},
    missing: Callable[[], Optional[str]] = lambda: None,
    patch=None,
    in_order: bool = False,
) -> Consumer:
    """vLLM serving a family with `method`: `model` = the export directory is passed as the draft model;
    `extra` = further keys read from the export's settings (e.g. parallel_drafting, prompt lookup sizes)."""

    def speculative_config(export_dir: str | Path, gamma: int, settings: Optional[dict] = None) -> dict:
        settings = read_settings(export_dir) if settings is None else settings
        where = {"model": str(export_dir)} if model else {}
        return {"method": method, **where, **extra(settings), "num_speculative_tokens": gamma}

    def usage(target: str, gamma: int, provenance: dict) -> str:
        spec = speculative_config("THIS_DIRECTORY", gamma, provenance.get("drafter_config") or {})
        return f"""vLLM (offline, or `vllm serve` with the same dict):

```python
from vllm import LLM
llm = LLM(
    model="{target}",
    speculative_config={python_literal(spec)},
)
```

```bash
vllm serve {target} --speculative-config '{json.dumps(spec)}'
```"""

    optional = {"patch": patch} if patch is not None else {}
    return Consumer(
        ENGINE,
        usage=usage,
        speculative_config=speculative_config,
        missing=missing,
        in_order=in_order,
        **optional,
    )
