"""On-policy distillation: the drafter drafts, the frozen target scores those drafts online.

Off-policy training only ever shows the drafter the target's own continuations; at inference it
conditions on its own drafts, whose mistakes compound along a chain. DistillSpec trains on a
mix: a share λ (`trainer.on_policy_fraction`) of micro-batches is drafted by the drafter itself
and the loss pulls its distribution toward the target's on exactly those positions.

- A draft LM answers each prompt itself (as long as the target's answer was), through the
  engine's `DraftLMProposer` — the same KV cache and sampling code the speculative loop runs.
- An EAGLE-style drafter drafts, from every assistant position of the target's sequence, the
  γ-chain the speculative loop would draft there (its training-time test with its own samples fed
  back); the target scores every chain in one tree forward over the engine's `SlotCache`.

Which micro-batches are on-policy and every sample drawn depend only on (seed, micro-step,
process), so a resumed run replays an uninterrupted one exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from eval.kv_cache import SlotCache
from eval.proposer import DraftLMProposer
from eval.sampling import SamplingParams, probs_from_logits, sample

POLICIES = ("off_policy", "on_policy")


@dataclass(frozen=True)
class OnPolicy:
    fraction: float  # λ: share of micro-batches the drafter drafts
    temperature: float  # the drafter samples at this temperature (0 = greedy)
    seed: int
    rank: int = 0  # process index: processes draw different samples

    def takes(self, batch: dict) -> bool:
        """Whether this micro-batch is drafted by the drafter (batches without a micro-step never are)."""
        if "micro_step" not in batch:  # checkpoint selection and other fixed batches stay off-policy
            return False
        return random.Random(self.seed * 1_000_003 + int(batch["micro_step"])).random() < self.fraction

    def generator(self, batch: dict, device) -> torch.Generator:
        seed = (self.seed * 1_000_003 + int(batch["micro_step"])) * 1_009 + self.rank
        return torch.Generator(device=device).manual_seed(seed)

    @property
    def params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature)

    def draw(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One token per row of logits (…, V), as the engine draws drafts: argmax when greedy."""
        if self.params.greedy:
            return logits.argmax(-1)
        return sample(probs_from_logits(logits, self.params), generator)


def first_answer_index(loss_mask: torch.Tensor) -> list[int]:
    """Per row of (B, T), the index of the first assistant token (the prompt's length)."""
    return [int(row.nonzero()[0]) if row.any() else len(row) for row in loss_mask.bool()]


@torch.no_grad()
def draft_lm_rollout(
    model, batch: dict, policy: OnPolicy, vocab_size: int, pad_token_id: int, eos_ids: set[int]
) -> dict[str, torch.Tensor]:
    """The batch with each row's answer replaced by the drafter's own, sampled by the engine's proposer.

    Each row keeps its prompt; the drafter continues it for as many tokens as the target's answer
    had (ending early at an end token, which it keeps). The new answer tokens are the loss positions.
    """
    ids, attention, loss_mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    starts = first_answer_index(loss_mask * attention)
    lengths = (loss_mask * attention).sum(1).tolist()
    prompts = [ids[b, :s].tolist() for b, s in enumerate(starts)]
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrap the drafter; sharding hooks sit on its modules
    proposer = DraftLMProposer(getattr(inner, "model", inner), vocab_size)  # heads.draft_lm.DraftLM holds the HF LM
    proposer.reset(len(prompts), ids.device)
    drafted = proposer.propose(prompts, max(max(lengths), 1), policy.params, policy.generator(batch, ids.device))
    rows, masks = [], []
    for b, prompt in enumerate(prompts):
        answer = drafted.draft_tokens[b, : lengths[b]].tolist()
        ends = [i for i, t in enumerate(answer) if t in eos_ids]
        answer = answer[: ends[0] + 1] if ends else answer
        rows.append(prompt + answer)
        masks.append([0] * len(prompt) + [1] * len(answer))
    width = ids.shape[1]
    out = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask", "loss_mask")}
    out["input_ids"] = torch.full_like(ids, pad_token_id)
    out["attention_mask"], out["loss_mask"] = torch.zeros_like(attention), torch.zeros_like(loss_mask)
    for b, (row, m) in enumerate(zip(rows, masks)):
        n = min(width, len(row))
        out["input_ids"][b, :n] = torch.tensor(row[:n], device=ids.device)
        out["attention_mask"][b, :n] = 1
        out["loss_mask"][b, :n] = torch.tensor(m[:n], device=ids.device)
    return out


def branch_block(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, anchors: torch.Tensor, drafts: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The sequence plus a draft chain at every anchor, as one token tree.

    Args:
        input_ids, attention_mask: (B, T) the target's sequence (right-padded).
        anchors: (B, T) bool; anchor t's chain continues the sequence after token t+1.
        drafts: per chain step j = 1…n, (B, T): the token drafted at step j from anchor t.
    Returns:
        tokens, parents, valid: (B, T + M) the tree block (sequence nodes first, chains after);
        node_of: per step j, (B, T) the block index of anchor t's step-j node (−1 where no anchor).
    """
    B, T = input_ids.shape
    n = len(drafts)
    counts = anchors.sum(1).tolist()
    M = max(counts) * n
    device = input_ids.device
    tokens = torch.cat([input_ids, torch.zeros(B, M, dtype=torch.long, device=device)], dim=1)
    parents = torch.cat(
        [torch.arange(-1, T - 1, device=device).expand(B, T), torch.full((B, M), -1, device=device)], dim=1
    )
    valid = torch.cat([attention_mask.bool(), torch.zeros(B, M, dtype=torch.bool, device=device)], dim=1)
    node_of = [torch.full((B, T), -1, dtype=torch.long, device=device) for _ in range(n)]
    for b in range(B):
        where = anchors[b].nonzero().flatten()  # (A,)
        A = len(where)
        if not A:
            continue
        first = T + torch.arange(A, device=device) * n  # step 1 node of each chain
        for j in range(n):
            nodes = first + j
            tokens[b, nodes] = drafts[j][b, where]
            parents[b, nodes] = where + 1 if j == 0 else nodes - 1  # step 1 hangs off token t+1
            valid[b, nodes] = True
            node_of[j][b, where] = nodes
    return tokens, parents, valid, node_of


@torch.no_grad()
def score_branches(target, tokens: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The target's logits (B, N, V) at every node of a tree block, by the engine's tree forward.

    Each node sees exactly its ancestors at their sequence positions, so its logits equal a plain
    forward over the sequence up to the anchor followed by the chain (tested)."""
    cache = SlotCache(tokens.shape[0], tokens.device)
    return cache.forward(target, tokens, parents, valid).logits
