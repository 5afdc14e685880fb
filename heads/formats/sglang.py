"""SGLang as a consumer: EAGLE-3's LlamaForCausalLMEagle3 layout in the export's `sglang/` directory,
and the card's launch command. drafthub does not start SGLang: its CPU backend needs an Intel AMX Xeon,
so the layout is checked by its tests (config fields, tensor names) rather than served."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from heads.eagle import Eagle3Drafter
from heads.formats import Consumer

ENGINE = "sglang"
SUBDIR = "sglang"


def sglang_config(drafter: Eagle3Drafter) -> dict:
    """SGLang counts aux layer ids from the first decoder layer's output (k − 1 in HF hidden_states ids)."""
    a = drafter.arch
    return {
        **a.llama_config(),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": a.draft_vocab_size,
        "target_hidden_size": a.target_hidden_size,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": [i - 1 for i in a.layer_ids],
            "use_aux_hidden_state": True,
        },
    }


def sglang_tensors(drafter: Eagle3Drafter) -> dict[str, torch.Tensor]:
    """SGLang's LlamaForCausalLMEagle3 names: the decoder layer is `midlayer.*`, no embed_tokens
    (SGLang shares the target's)."""
    out = {}
    for name, value in drafter.state_dict().items():
        if name.startswith("embed_tokens."):
            continue
        out[name.replace("layers.0.", "midlayer.", 1)] = value.detach().contiguous()
    return out


def _write_eagle3(job, out: Path) -> None:
    drafter = Eagle3Drafter.from_pretrained(job.checkpoint)
    out.mkdir()
    (out / "config.json").write_text(json.dumps(sglang_config(drafter), indent=2))
    save_file(sglang_tensors(drafter), str(out / "model.safetensors"), metadata={"format": "pt"})


def _eagle3_usage(target: str, gamma: int, provenance: dict) -> str:
    return f"""SGLang (the `{SUBDIR}/` subdirectory, `LlamaForCausalLMEagle3` layout):

```bash
python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 \\
  --speculative-draft-model-path THIS_DIRECTORY/{SUBDIR} --speculative-num-steps {gamma} \\
  --speculative-eagle-topk 1 --speculative-num-draft-tokens {gamma + 1}
```"""


EAGLE3 = Consumer(
    ENGINE,
    usage=_eagle3_usage,
    subdir=SUBDIR,
    write=_write_eagle3,
    missing=lambda: "drafthub does not start SGLang (its CPU backend needs an Intel AMX Xeon); use eval.serve=vllm",
)
