"""Medusa: extra heads on the frozen target's last hidden state, head k distilled towards the token
k+2 ahead; after training, held-out accuracy builds the token tree they decode with."""

from __future__ import annotations

import torch

from distill.features.capture import final_hidden_states
from distill.targets.load import padding_id
from heads.medusa import MedusaHeads
from heads.medusa_tree import build_tree, expected_tau, rank_accuracy
from train.data import collate
from train.losses import KD_LOSSES, kd_loss
from train.setups.base import Prepared, TrainContext, TrainingSetup, hold_out, logits_bytes
from train.sharded_target import whole_embeddings


class MedusaDistillation:
    """Train Medusa heads on a frozen target's own samples, hidden states computed online.

    Head k at position t reads the target's final hidden state h_t and predicts token t+k+2;
    a position counts when that token is assistant-written. loss_k is `loss` between head k
    and either the sampled token (`ce`) or the target's own distribution for that token, i.e.
    its logits at t+k+1 (`fkl` etc.: self-distillation). The total is Σ_k loss_decay^k · loss_k.
    Each head sees only its valid positions, so no (K, B, T, V) tensor is materialised.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        num_heads: int,
        loss: str,
        vocab_size: int,
        *,
        loss_decay: float = 0.8,
        jsd_beta: float = 0.5,
        kd_temperature: float = 1.0,
    ):
        self.target, self.num_heads, self.loss, self.vocab_size = target, num_heads, loss, vocab_size
        self.loss_decay, self.jsd_beta, self.kd_temperature = loss_decay, jsd_beta, kd_temperature
        self.progress_keys = ["loss", *(f"head{k}_top1" for k in range(num_heads))]  # the rest goes to the trackers

    def __call__(self, model, batch):
        # (B, T, H), (B, T, V)
        hidden, target_logits = final_hidden_states(self.target, batch["input_ids"], batch["attention_mask"])
        inputs, all_labels, masks = medusa_positions(hidden, batch, self.num_heads, with_masks=True)
        total, metrics, t = 0.0, {}, self.kd_temperature
        for k, (logits, labels, m) in enumerate(zip(model(inputs), all_labels, masks)):
            logits = logits[:, : self.vocab_size]  # (N_k, V)
            # logits at t+k+1 predict t+k+2
            teacher = None if self.loss == "ce" else target_logits[:, k + 1 : -1][m][:, : self.vocab_size] / t
            per_token = kd_loss(self.loss, logits / t, teacher, labels, self.jsd_beta)
            loss_k = per_token.sum() / max(per_token.numel(), 1)  # an empty head still joins the graph
            total = total + self.loss_decay**k * loss_k
            with torch.no_grad():
                hits = rank_accuracy(logits, labels, 5).cumsum(0)  # top-1 … top-5
                metrics[f"head{k}_loss"] = loss_k.detach()
                metrics[f"head{k}_top1"], metrics[f"head{k}_top5"] = hits[0], hits[4]
        metrics["loss"], metrics["positions"] = total.detach(), masks[0].sum()
        return total, metrics


def medusa_positions(hidden: torch.Tensor, batch: dict[str, torch.Tensor], num_heads: int, with_masks: bool = False):
    """Per head k: the hidden states h_t (N_k, H) whose label token t+k+2 is assistant-written, and those labels (N_k,).

    With with_masks, also the (B, T−k−2) position masks that selected them.
    """
    counts = (batch["loss_mask"] * batch["attention_mask"]).bool()  # (B, T): token t counts
    masks = [counts[:, k + 2 :] for k in range(num_heads)]
    inputs = [hidden[:, : -(k + 2)][m] for k, m in enumerate(masks)]
    labels = [batch["input_ids"][:, k + 2 :][m] for k, m in enumerate(masks)]
    return (inputs, labels, masks) if with_masks else (inputs, labels)


@torch.no_grad()
def calibrate_medusa(
    heads: MedusaHeads,
    target,
    holdout,
    *,
    tree_topk: int,
    tree_nodes: int,
    vocab_size: int,
    pad_token_id: int,
    batch_size: int,
    max_seq_len: int,
) -> dict:
    """Set heads.tree / heads.calibration from `holdout` (rows with input_ids, loss_mask); return the calibration.

    Runs once after training: per head, the share of positions whose true next-but-k token is the
    head's rank-i candidate (i < tree_topk); Medusa's greedy construction turns those accuracies
    into the node-budgeted tree that is saved with the checkpoint and the export.
    """
    device = next(target.parameters()).device
    hits = torch.zeros(heads.num_heads, tree_topk)
    positions = torch.zeros(heads.num_heads)
    for start in range(0, len(holdout), batch_size):
        rows = holdout[start : start + batch_size]
        batch = {
            k: v.to(device) for k, v in collate(rows["input_ids"], rows["loss_mask"], max_seq_len, pad_token_id).items()
        }
        hidden, _ = final_hidden_states(target, batch["input_ids"], batch["attention_mask"])
        inputs, labels = medusa_positions(hidden, batch, heads.num_heads)
        for k, logits in enumerate(heads(inputs)):
            n = labels[k].numel()
            # host sync: once per batch
            hits[k] += rank_accuracy(logits[:, :vocab_size], labels[k], tree_topk).cpu() * n
            positions[k] += n
    accuracy = (hits / positions.clamp(min=1)[:, None]).tolist()
    tree = build_tree(accuracy, tree_nodes)
    calibration = {
        "head_accuracy": [[round(a, 5) for a in row] for row in accuracy],  # [head][rank]
        "holdout_samples": len(holdout),
        "positions_per_head": positions.int().tolist(),
        "tree_nodes": len(tree),
        "tree_depth": max(map(len, tree)),
        "expected_tau": round(expected_tau(tree, accuracy), 4),
    }
    heads.tree, heads.calibration = tree, calibration
    return calibration


def _prepare_medusa(ctx: TrainContext) -> Prepared:
    cfg, trainer = ctx.cfg, ctx.cfg.trainer
    dataset, holdout = hold_out(ctx.dataset, cfg.drafter.holdout_samples, trainer.batch_size, "drafter.holdout_samples")
    objective = MedusaDistillation(
        ctx.target,
        cfg.drafter.num_heads,
        trainer.loss,
        len(ctx.tokenizer),
        loss_decay=cfg.drafter.loss_decay,
        jsd_beta=trainer.jsd_beta,
        kd_temperature=trainer.kd_temperature,
    )
    with whole_embeddings(ctx.target):
        heads = MedusaHeads.from_target(cfg.drafter, ctx.target)
    return Prepared(heads, objective, dataset, state={"holdout": holdout})


def _finish_medusa(heads: MedusaHeads, prepared: Prepared, ctx: TrainContext) -> dict:
    """The token tree comes from accuracy on samples training never saw."""
    d, trainer = ctx.cfg.drafter, ctx.cfg.trainer
    calibration = calibrate_medusa(
        heads.eval(),
        ctx.target,
        prepared.state["holdout"],
        tree_topk=d.tree_topk,
        tree_nodes=d.tree_nodes,
        vocab_size=len(ctx.tokenizer),
        pad_token_id=padding_id(ctx.tokenizer),
        batch_size=trainer.batch_size,
        max_seq_len=trainer.max_seq_len,
    )
    return {"medusa": calibration}


def _activations_medusa(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d = cfg.drafter
    return 0.0, d.num_heads * (2 * d.num_layers * tokens * hidden * act_bytes + logits_bytes(tokens, vocab))


SETUP = TrainingSetup(
    prepare=_prepare_medusa,
    held_out=lambda d: {"drafter.holdout_samples": d.holdout_samples},
    meta_drafter=lambda cfg, target, config: MedusaHeads.from_target(cfg.drafter, target),
    activations=_activations_medusa,
    finish=_finish_medusa,
    losses=KD_LOSSES,
    off_policy_only="its heads read only the target's hidden states, never their own drafts",
)
