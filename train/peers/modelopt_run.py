"""NVIDIA ModelOpt's EAGLE-3 trained on drafthub's data: its model, loss and export, run in this process.

ModelOpt ships its EAGLE-3 (`mtsp.convert(model, [("eagle", config)])`), loss and exporter in the wheel; its
driver is a repository script around HF's Trainer. Here a plain loop feeds ModelOpt's model the batches drafthub
trains on (train.data.BatchOrder: the same rows in the same order), with drafthub's optimizer, schedule and
clipping, so that the model and loss alone differ. ModelOpt runs offline (`eagle_offline`): the target's features
come from the run's feature store, as speculators' come from its hidden-states files and drafthub's from that
store; the HF target stays in process for its lm_head. On a CPU: no torch.compile, float32 throughout.

Install it where it cannot replace the CPU torch: `pip install --no-deps nvidia-modelopt==0.47.0 "pulp<4"`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from train.data import BatchOrder
from train.peers.speculators_run import PeerSettings

# ModelOpt numbers its aux layers by the decoder layer whose output they are; drafthub, speculators and vLLM by the
# hidden_states index entering a layer: output of layer i = hidden_states[i + 1]
OUTPUT_OF = -1


def _transformers_compat() -> None:
    """ModelOpt 0.47 is tested with transformers < 5.15 (its [hf] extra pins it; drafthub runs 5.19): the one call
    that no longer fits is its drafter's rotary embedding, built with a `device` argument transformers dropped."""
    from modelopt.torch.speculative.plugins import modeling_eagle
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    def rotary(config, device=None):
        return LlamaRotaryEmbedding(config=config).to(device)

    modeling_eagle.LlamaRotaryEmbedding = rotary


def modelopt_config(target_config, settings: PeerSettings) -> dict:
    """The `eagle` mode's config for the target: one llama decoder layer shaped like the target's (ModelOpt's
    default is Llama-8B's), offline features, the run's TTT depth and step weights, plain RoPE in the export."""
    t = target_config
    return {
        "eagle_offline": True,
        "eagle_decoder_type": "llama",
        "eagle_ttt_steps": settings.ttt_steps,
        "eagle_loss_decay_factor": settings.step_decay,
        "eagle_use_torch_compile": False,
        "eagle_export_rope_scaling": {},
        "eagle_freeze_base_model": True,
        "eagle_architecture_config": {
            "num_hidden_layers": 1,
            "num_attention_heads": t.num_attention_heads,
            "num_key_value_heads": t.num_key_value_heads,
            "head_dim": getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
            "intermediate_size": t.intermediate_size,
            "rms_norm_eps": t.rms_norm_eps,
            "rope_theta": _rope_theta(t),
            "rope_scaling": {"rope_type": "default", "rope_theta": _rope_theta(t)},
            "eagle_aux_hidden_state_layer_ids": [i + OUTPUT_OF for i in settings.layer_ids],
            "draft_vocab_size": settings.draft_vocab_size,
        },
    }


def _rope_theta(config) -> float:
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return float(rope.get("rope_theta") or getattr(config, "rope_theta", 10000.0))


def train_modelopt(target_dir: Path, store, order: BatchOrder, settings: PeerSettings, d2t: torch.Tensor, out: Path):
    """Train ModelOpt's EAGLE-3 on drafthub's batches (`order`: its training rows in its order, whose row indices
    the feature `store` is keyed by) and export it; return (export directory, training seconds: the loop, as
    drafthub's and speculators' figures count theirs)."""
    import modelopt.torch.speculative as mtsp
    from modelopt.torch.export import export_speculative_decoding
    from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

    _transformers_compat()
    torch.manual_seed(settings.seed)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    mtsp.convert(model, [("eagle", modelopt_config(model.config, settings))])
    model.eagle_module.d2t.copy_(d2t)  # drafthub's draft vocabulary, as speculators is given it
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95))
    scheduler = get_cosine_schedule_with_warmup(optimizer, settings.warmup_steps, settings.max_steps)
    # ModelOpt builds its training-time-test masks once, for the first batch's length (its driver pads every row to
    # training_seq_len): every batch is padded to the longest training row
    width = min(order.max_seq_len, max(map(len, order.dataset["input_ids"])))
    t0 = time.perf_counter()
    with open(out / "modelopt.log", "w") as log:
        for step in range(settings.max_steps):
            batch = {
                k: F.pad(v, (0, width - v.shape[1]), value=order.pad if k == "input_ids" else 0)
                for k, v in order.batch(step).items()
                if k in ("input_ids", "attention_mask", "loss_mask")
            }
            features, last_hidden = store.batch(order.indices(step), width)
            offline = {"aux_hidden_states": features, "base_model_hidden_states": last_hidden}  # lm_head inputs
            result = model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                loss_mask=batch["loss_mask"],
                base_model_outputs=offline,
            )
            result.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step(), scheduler.step(), optimizer.zero_grad(set_to_none=True)
            log.write(json.dumps({"step": step + 1, "loss": result.loss.item(), "acc": result.train_acc}) + "\n")
    seconds = time.perf_counter() - t0
    export = out / "export"
    shutil.rmtree(export, ignore_errors=True)
    model.eval()
    export_speculative_decoding(model, export_dir=export)
    return export, seconds


def as_speculators(export: Path, template: Path, out: Path) -> Path:
    """ModelOpt's export (LlamaForCausalLMEagle3: layers.0.*, fc, norm, lm_head, d2t) in the speculators layout
    drafthub and vLLM load, beside drafthub's export of the same shape (`template`: its config.json, with the
    verifier). The tensors are ModelOpt's own; t2d is derived from d2t; embed_tokens stays the target's."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(export / "model.safetensors"))
    d2t = tensors["d2t"].long()
    config = json.loads((template / "config.json").read_text())
    t2d = torch.zeros(config["transformer_layer_config"]["vocab_size"], dtype=torch.bool)
    t2d[d2t + torch.arange(d2t.numel())] = True
    tensors = {k: v.float().contiguous() for k, v in tensors.items() if k != "d2t"} | {"d2t": d2t, "t2d": t2d}
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
