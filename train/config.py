"""The structured config of `python -m train` and its registration in Hydra's ConfigStore.

Every default lives here; YAML under conf/ and recipes/ only selects and overrides. Unknown keys
are errors. Recipes are registered as the `recipe` group from recipes/*.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf

from distill.config import DataConfig, TargetConfig
from eval.config import EvalConfig
from heads.settings import NO_EFFECT

STAGES = ("distill", "train", "eval", "publish")


@dataclass
class TrainerConfig:
    # fkl | rkl | jsd | tvd | ce (plain CE on the sampled tokens, no teacher) | al (expected accepted length of a
    # γ-chain, maximised); Medusa: per head; EAGLE-3: fkl (soft CE over its training-time test) or al
    loss: str = "fkl"
    # loss=al: the chain length γ whose expected accepted length is maximised; also the on-policy chains' length
    acceptance_gamma: int = 4
    # off_policy: train on the distilled sequences | on_policy: a share of the micro-batches is drafted by the
    # drafter itself and scored by the frozen target online (DistillSpec)
    policy: str = "off_policy"
    on_policy_fraction: float = 0.5  # on_policy: share λ of micro-batches drafted by the drafter (DistillSpec's mix)
    on_policy_temperature: float = 1.0  # on_policy: temperature the drafter samples its drafts at (0 = greedy)
    # on_policy: chains (the γ-chain the speculative loop drafts after every answer position; EAGLE-3 only
    # drafts these) | answers (draft LM: the drafter writes whole answers to the prompts, as in DistillSpec)
    on_policy_rollout: str = "chains"
    jsd_beta: float = 0.5  # β of the generalised JSD (0.5 = symmetric JSD)
    kd_temperature: float = 1.0  # softens both distributions before the KD loss
    # EAGLE-3, loss fkl: the target's distribution cut to its k most likely draft-vocabulary tokens and renormalised
    # (what a store of top-k logits keeps instead of the hidden state); 0 = its whole draft-vocabulary distribution
    kd_top_k: int = 0
    lr: float = 3e-3  # peak learning rate (of AdamW, and of Muon scaled to AdamW's RMS)
    # adamw | muon (Muon on the drafter's hidden matrices, AdamW on embeddings, lm_head, vectors: train/optimizers.py)
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    warmup_steps: int = 20  # linear warm-up, then the schedule's decay
    max_steps: int = 300  # optimizer steps
    # cosine (a cosine to 0 at max_steps) | wsd (warm-up, stable, then a cosine to 0 over the last decay_share of
    # max_steps): a wsd run keeps its checkpoint at the decay's start, from which any longer run continues exactly
    schedule: str = "cosine"
    decay_share: float = 0.2  # wsd: the share of max_steps its final decay takes
    # a finished run directory of this drafter whose training this run extends (more trainer.max_steps, a larger
    # data.max_prompts, or both; every other setting the same): training starts from its checkpoint, not step 0,
    # and its distilled answers are reused (train/stages/continuation.py)
    continue_from: Optional[str] = None
    batch_size: int = 16  # global micro-batch (sequences), split across processes
    grad_accum: int = 1  # micro-batches per optimizer step
    max_seq_len: int = 512  # longer samples are cut (with their answers' tails: see max_cut_share)
    # the share of the data's answer tokens max_seq_len may cut off before the train stage refuses (a cap kept from
    # shorter data); set it higher to accept the loss as the price of a memory budget
    max_cut_share: float = field(default=0.1, metadata=NO_EFFECT)
    max_grad_norm: float = 1.0
    # auto (bf16 on a capable GPU, else no) | native (bf16 wherever the device computes it natively: that GPU, or a
    # CPU with AVX-512-BF16 or AMX; else no) | no | bf16 | fp16
    mixed_precision: str = "auto"
    # the frozen target across processes: auto (sharded under a DeepSpeed ZeRO-3 or FSDP launch, else replicated)
    # | replicate (every process holds it whole) | zero3 | fsdp (sharded under any multi-process launch)
    target_sharding: str = field(default="auto", metadata=NO_EFFECT)
    # checkpoint every N steps (and at the end); EAGLE-3 picks its best checkpoint among these, so it counts
    save_every: int = 100
    keep_last: int = field(default=2, metadata=NO_EFFECT)  # checkpoints kept on disk
    resume: bool = field(default=True, metadata=NO_EFFECT)  # continue from the latest checkpoint of this run, if any
    log_every: int = field(default=10, metadata=NO_EFFECT)  # steps between tracker logs
    log_with: List[str] = field(default_factory=list, metadata=NO_EFFECT)  # accelerate trackers: tensorboard, wandb
    seed: int = 0


@dataclass
class PublishConfig:
    # the drafter must reach this τ in eval to be published: τ = 1 is plain decoding (a drafter never accepted),
    # so the default asks for one accepted draft token every ten steps at least; recipes set what their family reaches
    min_tau: float = 1.1
    model_name: Optional[str] = None  # name in the model card; default: <recipe>-<kind>
    hub_dir: Optional[str] = None  # also add the drafter to this local registry (versioned; index.json + index.html)
    repo_id: Optional[str] = (
        None  # also upload to this Hugging Face repo (token: HF_TOKEN or `hf auth login`), one branch per run
    )
    private: bool = True  # a repo created by the upload is private unless set false
    # re-measure τ on verify_prompts of its own eval prompts before publishing (train/registry/claim_check.py);
    # the local registry lists the re-measured figures. 0 = off (the gate still checks the figures' digest)
    verify_prompts: int = 8
    # optional engine layouts added to the export: llamacpp writes gguf/ (the drafter as GGUF, by llama.cpp's own
    # converter; `python scripts/build_llamacpp.py` builds it once). eval.serve=llamacpp adds it too
    engines: List[str] = field(default_factory=list)
    # a bake-off's comparison.json (bakeoff.publish=best sets it): the card says why this drafter was chosen and
    # lists every contender's figures
    comparison: Optional[str] = None


@dataclass
class PlanConfig:
    # what the plan is for: gpu (the gpu_* settings below), cpu (this machine's RAM and CPU), or auto: this machine
    # (its GPUs, else its CPU) for a single process, GPUs for a distributed launch
    device: str = "auto"
    # single | ddp | zero2 | zero3 | fsdp (conf/accelerate/<name>.yaml) | path to an accelerate config file
    accelerate: str = "single"
    num_processes: Optional[int] = None  # GPUs trained on; None = the accelerate config's num_processes
    gpu_memory_gb: float = 80.0  # per GPU (H100/A100 80 GB)
    gpu_tflops: float = 989.0  # dense bf16 peak per GPU (H100 SXM)
    gpu_bandwidth_tbps: float = 3.35  # HBM bandwidth per GPU (H100 SXM), bounds decoding
    mfu: float = 0.35  # share of peak FLOPs training sustains
    # a run on a CPU whose plan needs more than this machine's RAM is refused before any stage (the estimate is
    # ±2×: false runs it anyway)
    check_memory: bool = True


@dataclass
class BakeoffConfig:
    recipes: List[str] = field(
        default_factory=list
    )  # contenders (recipe names) trained and evaluated alike; empty = a normal run
    # the engine serving every contender's export: auto (vLLM where installed) | vllm | llamacpp | off
    serve: str = "auto"
    speedup_tie: float = (
        0.03  # speed-ups within this share of the fastest count as equal; then the higher τ is recommended
    )
    overrides: Dict[str, List[str]] = field(
        default_factory=dict
    )  # per contender recipe (key "all": every one), applied after its recipe, e.g. {all: ["trainer.max_steps=1000"]}
    workload: str = "default"  # name of the workload the eval settings above describe
    # more workloads every contender is evaluated on (trained once): name → eval overrides, e.g.
    # {code_repeat: ["eval_split=heldout_repeat"]}; each lands under <run>/<name>/<recipe>
    workloads: Dict[str, List[str]] = field(default_factory=dict)
    # all: with publish.hub_dir / publish.repo_id, every contender is published (a registry whose leaderboard is the
    # bake-off); best: only the recommended one, with the comparison in its card, and the run ends on its line
    publish: str = "all"
    # the contender that is this run's own drafter (the main job's EAGLE-3): it trains with this run's drafter and
    # trainer settings, command-line overrides included; the others keep their recipes'. null: none is
    own: Optional[str] = None
    # true: the contenders of each workload are measured in one interleaved run against one shared baseline (the
    # plain decodes once for all, not once per contender; one path for all: eval.run.build_engine); false: each alone
    shared_baseline: bool = False


@dataclass
class RunConfig:
    recipe_name: str = "toy"
    stages: List[str] = field(default_factory=lambda: list(STAGES), metadata=NO_EFFECT)  # which stages run, in order
    # None: runs/<recipe>/<timestamp>, or the latest run with the same settings (resumed)
    run_dir: Optional[str] = field(default=None, metadata=NO_EFFECT)
    new_run: bool = field(default=False, metadata=NO_EFFECT)  # true: always start a fresh timestamped run directory
    # the split eval reads: of eval_prompts when set, else of data.prompts (which must then be a dataset with that
    # split). None = the toy world's heldout split, eval_prompts' train split (a file has only that), or, with no
    # eval source at all, the data.holdout prompts split off data.prompts before distillation
    eval_split: Optional[str] = None
    eval_prompts: Optional[str] = None  # eval prompt source (a file, a dataset directory or an HF dataset name)
    # the column of eval_prompts holding the prompts, read as data.prompts_column reads data.prompts' (data.prompts
    # itself, measured by eval_split or its held-out slice, is read with data.prompts_column); None = auto-detected
    eval_prompts_column: Optional[str] = None
    device: str = field(default="auto", metadata=NO_EFFECT)  # auto | cpu | cuda | cuda:N
    # true: print the plan (memory per GPU, disk, tokens, steps, time) and stop; loads no weights
    dry_run: bool = field(default=False, metadata=NO_EFFECT)
    target: TargetConfig = field(default_factory=TargetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    drafter: Any = MISSING  # one of the drafter group's schemas (conf/drafter/)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    publish: PublishConfig = field(default_factory=PublishConfig)
    plan: PlanConfig = field(default_factory=PlanConfig, metadata=NO_EFFECT)  # hardware the dry-run plans for
    bakeoff: BakeoffConfig = field(default_factory=BakeoffConfig)


def register_configs() -> None:
    """Register the schemas and the recipe group; called by the entry points, not on import."""
    from hydra.core.config_store import ConfigStore

    from heads.families import FAMILIES

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for family in FAMILIES.values():  # conf/drafter/<kind>.yaml selects <kind>_schema
        cs.store(group="drafter", name=f"{family.kind}_schema", node=family.schema)
    for entry in resources.files("recipes").iterdir():
        if entry.name.endswith(".yaml"):
            node = OmegaConf.create(entry.read_text())
            cs.store(group="recipe", name=entry.name[: -len(".yaml")], node=node, package="_global_")
