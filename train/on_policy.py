"""On-policy distillation: the drafter drafts, the frozen target scores those drafts online.

Off-policy training only ever shows the drafter the target's own continuations; at inference it
conditions on its own drafts, whose mistakes compound along a chain. DistillSpec trains on a
mix: a share λ (`trainer.on_policy_fraction`) of micro-batches is drafted by the drafter itself
and the loss pulls its distribution toward the target's on exactly those positions.

- A draft LM drafts, from every assistant position of the target's answer, the γ-chain the
  speculative loop would draft there (`trainer.on_policy_rollout=chains`, the default), or
  answers each prompt itself as DistillSpec does (`answers`: as long as the target's answer was,
  through the engine's `DraftLMProposer` — the same KV cache and sampling code the loop runs).
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

from eval.kv_cache import SlotCache, block_attention
from eval.proposers.draft_lm import DraftLMProposer
from eval.sampling import SamplingParams, probs_from_logits, sample

POLICIES = ("off_policy", "on_policy")
ROLLOUTS = ("chains", "answers")  # what the drafter drafts on-policy: γ-chains off the target's answer, or answers


@dataclass(frozen=True)
class OnPolicy:
    fraction: float  # λ: share of micro-batches the drafter drafts
    temperature: float  # the drafter samples at this temperature (0 = greedy)
    seed: int
    rank: int = 0  # process index: processes draw different samples
    rollout: str = "chains"  # one of ROLLOUTS (EAGLE-style drafters always draft chains)

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


def _causal_lm(model):
    """The HF causal LM inside a draft LM: DDP / DeepSpeed wrap the drafter (sharding hooks sit on its
    modules) and heads.draft_lm.DraftLM holds the LM."""
    inner = getattr(model, "module", model)
    return getattr(inner, "model", inner)


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
    proposer = DraftLMProposer(_causal_lm(model), vocab_size)
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


def chain_starts(counts: torch.Tensor) -> torch.Tensor:
    """(B, T) bool anchors of `branch_block` for chains drafted after every counted position.

    counts: (B, T − 1), position p counts when token p + 1 is assistant-written; the chain from p
    continues the sequence after token p, which `branch_block` calls anchor p − 1.
    """
    return torch.nn.functional.pad(counts[:, 1:], (0, 2))


@torch.no_grad()
def draft_lm_chains(
    model, batch: dict, anchors: torch.Tensor, steps: int, policy: OnPolicy, vocab_size: int
) -> list[torch.Tensor]:
    """Per chain step j = 1…steps, (B, T): the token a draft LM draws at anchor t's chain.

    The speculative loop's drafts: step 1 continues the target's sequence, each later step also
    reads the drafter's own earlier steps (one tree forward per step over the engine's SlotCache)."""
    ids, attention = batch["input_ids"], batch["attention_mask"]
    inner, generator = _causal_lm(model), policy.generator(batch, ids.device)
    rows, where = anchors.nonzero(as_tuple=True)
    logits = inner(input_ids=ids, attention_mask=attention).logits
    at = logits[rows, where + 1]  # anchor t's step 1 reads the sequence up to token t + 1
    drafts: list[torch.Tensor] = []
    for _ in range(steps):
        step = torch.zeros_like(ids)
        step[rows, where] = policy.draw(at[:, :vocab_size], generator)
        drafts.append(step)
        if len(drafts) == steps:
            break
        tokens, parents, valid, node_of = branch_block(ids, attention, anchors, drafts)
        logits = SlotCache(ids.shape[0], ids.device).forward(inner, tokens, parents, valid).logits
        at = logits[rows, node_of[-1][rows, where]]
    return drafts


def tree_logits(model, tokens: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The drafter's logits (B, N, V) at every node of a tree block, with gradients, through its wrapper.

    The same masks and positions as the engine's tree forward (`block_attention`), without a cache."""
    none_cached = torch.zeros(tokens.shape[0], 0, dtype=torch.bool, device=tokens.device)
    mask, positions = block_attention(none_cached, parents, valid, next(model.parameters()).dtype)
    return model(input_ids=tokens, attention_mask=mask, position_ids=positions).logits
