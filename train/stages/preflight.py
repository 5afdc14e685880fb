"""Preflight: every setting that would otherwise fail only after earlier stages ran, checked against
every table the drafter's family needs (heads FAMILIES, train SETUPS, eval PROPOSERS) before any
stage touches the disk, the network or an engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from distill.config import DATA_SOURCES
from distill.errors import DistillError
from eval.proposers import check_eval_settings
from eval.serving import SERVERS, missing_reason
from eval.serving.load import check_servers_answer
from eval.vocabulary import tokenizer_matches
from heads.families import get_family
from heads.formats import ENGINE_NAMES
from train.config import STAGES, RunConfig
from train.errors import PipelineError
from train.eval_prompts import FILE_SUFFIXES, check_eval_source
from train.losses import LOSSES
from train.on_policy import POLICIES, ROLLOUTS
from train.optimizers import OPTIMIZERS
from train.schedule import schedule_problem
from train.setups import training_setup


def check_run(cfg: RunConfig) -> None:
    """Every setting that would otherwise fail only after earlier stages ran: one error, before any work."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise PipelineError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
    family = get_family(cfg.drafter.kind)  # an unknown kind fails here, naming the known ones
    _check_sizes(cfg)
    _check_files(cfg)
    family.check(cfg.drafter)
    _check_against_target(family, cfg)
    _check_chat_template(cfg)
    if cfg.data.num_shards > 1 and set(cfg.stages) - {"distill"}:
        raise PipelineError(
            f"data.num_shards={cfg.data.num_shards} distils one part of the dataset; run each part with "
            "stages=[distill], merge them with `python -m distill merge=[PART,…] out_dir=RUN_DIR/data` "
            "(same settings), then run the other stages"
        )
    if cfg.data.source not in DATA_SOURCES:
        raise PipelineError(f"data.source={cfg.data.source!r}; use one of {list(DATA_SOURCES)}")
    if family.trainable:
        _check_training(training_setup(family.kind), family.kind, cfg.trainer)
        _check_features(cfg)
        _check_launch(cfg, training_setup(family.kind), family.kind)
    check_eval_settings(family.kind, cfg.drafter, cfg.eval)
    if "eval" in cfg.stages or cfg.bakeoff.recipes:
        check_eval_source(cfg)
    if cfg.bakeoff.own is not None and cfg.bakeoff.own not in cfg.bakeoff.recipes:
        raise PipelineError(f"bakeoff.own={cfg.bakeoff.own} is not one of bakeoff.recipes={cfg.bakeoff.recipes}")
    if cfg.bakeoff.publish not in ("all", "best"):
        raise PipelineError(f"bakeoff.publish={cfg.bakeoff.publish!r}; use all (every contender) or best")
    if cfg.bakeoff.serve not in ("auto", "off", *SERVERS):
        raise PipelineError(
            f"bakeoff.serve={cfg.bakeoff.serve!r}; use auto (served check where vLLM is installed), "
            f"one of {list(SERVERS)}, or off"
        )
    if cfg.bakeoff.recipes and cfg.bakeoff.serve in SERVERS and missing_reason(cfg.bakeoff.serve):
        raise PipelineError(f"bakeoff.serve={cfg.bakeoff.serve}: {missing_reason(cfg.bakeoff.serve)}, or set it off")
    unknown = sorted(set(cfg.bakeoff.overrides) - {"all", *cfg.bakeoff.recipes})
    if unknown:
        raise PipelineError(
            f"bakeoff.overrides has {unknown}, which are not contenders; "
            f"use 'all' or one of bakeoff.recipes={cfg.bakeoff.recipes}"
        )
    if cfg.eval.serve and not cfg.dry_run and missing_reason(cfg.eval.serve):  # a plan needs no engine
        raise PipelineError(f"eval.serve={cfg.eval.serve}: {missing_reason(cfg.eval.serve)}, or set eval.serve=null")
    if cfg.eval.serve and family.not_served(cfg.eval.serve):
        raise PipelineError(f"eval.serve={cfg.eval.serve}: {family.not_served(cfg.eval.serve)}; set eval.serve=null")
    if cfg.eval.serve_load and not cfg.dry_run and missing_reason("vllm"):  # vllm serve + vllm bench serve
        raise PipelineError(f"eval.serve_load: {missing_reason('vllm')}, or set eval.serve_load=[]")
    if cfg.eval.serve_load and cfg.eval.serve_url is None and family.not_served("vllm"):
        raise PipelineError(f"eval.serve_load: {family.not_served('vllm')}; set eval.serve_load=[]")
    if cfg.eval.serve_load and cfg.eval.serve_url is not None and not cfg.dry_run:
        check_servers_answer(cfg.eval)  # deployed servers: before distillation, not after every decode
    _check_publish_bar(cfg)
    for engine in cfg.publish.engines:
        if family.not_served(engine):
            raise PipelineError(f"publish.engines has {engine}: {family.not_served(engine)}; leave it out")
    if family.trainable and not cfg.bakeoff.recipes:  # what the data must hold and the machine fit, once every
        _check_sample_counts(cfg, training_setup(family.kind))  # setting is known good (a bake-off trains its
        _check_memory(cfg)  # contenders, not its own drafter: each is checked as it starts)


def check_stage_inputs(run) -> None:
    """What a stage reads that no earlier stage of this run writes (distilled answers, a trained drafter, an eval
    report) is on disk already and made with this run's settings, or the run is refused before its first stage:
    `stages=[distill,eval]` without a trained drafter fails before distilling, not after."""
    from train.stages.eval import _valid_report, check_inputs
    from train.stages.publish import check_inputs as publish_inputs
    from train.stages.run_dir import read_json
    from train.stages.train import SUMMARY

    stages, paths, family = list(run.cfg.stages), run.paths, get_family(run.cfg.drafter.kind)
    trained = read_json(paths.final / SUMMARY)
    if "train" in stages and family.trainable and not (trained and trained["stage_hash"] == run.hashes["train"]):
        if "distill" not in stages[: stages.index("train")] and not read_json(paths.data / "manifest.json"):
            raise PipelineError(
                f"no distilled data in {paths.data} to train on; run the distill stage first (stages=[distill,"
                f"{','.join(stages)}]), or give the run_dir of a run that distilled it"
            )
    if "eval" in stages and _valid_report(run, family) is None:
        check_inputs(run, family, frozenset(stages[: stages.index("eval")]))
    if "publish" in stages and "eval" not in stages:
        publish_inputs(run)


PRECISIONS = ("auto", "native", "no", "bf16", "fp16")


def _check_sizes(cfg: RunConfig) -> None:
    """Counts and sizes that would fail (or silently do nothing) only once a stage runs (eval's own: eval.run)."""
    t, d = cfg.trainer, cfg.data
    at_least_one = {
        "trainer.batch_size": t.batch_size,
        "trainer.grad_accum": t.grad_accum,
        "trainer.save_every": t.save_every,
        "trainer.log_every": t.log_every,
        "trainer.keep_last": t.keep_last,
        "trainer.max_seq_len": t.max_seq_len,
        "data.batch_size": d.batch_size,
        "data.shard_size": d.shard_size,
        "data.max_prompt_tokens": d.max_prompt_tokens,
        "data.sampling.max_new_tokens": d.sampling.max_new_tokens,
    }
    for key, value in at_least_one.items():
        if value < 1:
            raise PipelineError(f"{key}={value} must be at least 1")
    for key, value in {
        "trainer.max_steps": t.max_steps,
        "trainer.warmup_steps": t.warmup_steps,
        "data.max_prompts": d.max_prompts,
    }.items():
        if value < 0:
            raise PipelineError(f"{key}={value} must be 0 or more")
    if not 0 <= t.max_cut_share <= 1:
        raise PipelineError(f"trainer.max_cut_share={t.max_cut_share} is a share of the answer tokens, 0 to 1")
    if not t.lr > 0:
        raise PipelineError(f"trainer.lr={t.lr} must be positive")
    if t.mixed_precision not in PRECISIONS:
        raise PipelineError(f"trainer.mixed_precision={t.mixed_precision!r}; use one of {list(PRECISIONS)}")


def _check_publish_bar(cfg: RunConfig) -> None:
    """A publish bar no drafter can reach: a chain of γ drafts accepts at most γ + 1 tokens a step (the bonus token
    included), so publish.min_tau above that refuses every drafter, after distilling, training and measuring."""
    if "publish" not in cfg.stages or cfg.eval.tree is not None:
        return
    most = cfg.eval.num_speculative_tokens + 1
    if cfg.publish.min_tau > most:
        raise PipelineError(
            f"publish.min_tau={cfg.publish.min_tau} is more than the τ of {most} that a chain of "
            f"eval.num_speculative_tokens={cfg.eval.num_speculative_tokens} can reach (every draft accepted, plus the "
            "bonus token): no drafter could be published; lower publish.min_tau or raise eval.num_speculative_tokens"
        )


def _check_files(cfg: RunConfig) -> None:
    """Prompt files named by path must exist (a name that is no file is a dataset id, checked when loaded)."""
    for key, value in (("data.prompts", cfg.data.prompts), ("eval_prompts", cfg.eval_prompts)):
        if value and value.endswith(FILE_SUFFIXES) and not Path(value).exists():
            raise PipelineError(f"{key}={value} does not exist; give the path of a prompts file")


def _check_sample_counts(cfg: RunConfig, setup) -> None:
    """Settings that hold distilled samples out of training, and the batch, against the most samples distilling
    can give (distill/prompts/sample_bound.py): refused before the target answers anything, not after (a bound: a run
    refused here could not have trained)."""
    from distill.prompts.sample_bound import most_samples

    if not {"distill", "train"} <= set(cfg.stages) or (most := most_samples(cfg.data)) is None:
        return
    batch = cfg.trainer.batch_size
    caps = f"data.max_prompts={cfg.data.max_prompts}" + "".join(
        f", data.mix[{i}].max_prompts={m.max_prompts}" for i, m in enumerate(cfg.data.mix)
    )
    for key, count in setup.held_out(cfg.drafter).items():
        if count and count + batch > most:
            raise PipelineError(
                f"{key}={count} must leave ≥ trainer.batch_size={batch} samples for training, and distilling "
                f"gives at most {most} ({caps}); lower {key} or trainer.batch_size, or raise the prompts"
            )
    if most < batch:
        raise PipelineError(
            f"trainer.batch_size={batch} is more than the {most} samples distilling gives at most ({caps}); lower "
            "it or raise the prompts"
        )


def _check_memory(cfg: RunConfig) -> None:
    """A training run on this CPU that its plan says will not fit in the machine's RAM: refused before distilling
    (a GPU run is planned for its GPUs with dry_run=true, where they are)."""
    from train.planner import GIB, plan_device, plan_run

    if cfg.dry_run or "train" not in cfg.stages or not cfg.plan.check_memory or plan_device(cfg.plan) != "cpu":
        return
    try:
        plan = plan_run(cfg, timed=False)
    except DistillError:  # a config not readable offline yet: the train stage loads it
        return
    except Exception as e:  # an architecture the planner does not model: the run goes on, unchecked, and says so
        print(f"[plan] memory not checked ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return
    if not plan["fits"]:
        need = plan["memory_per_gpu_total"] * plan["processes"]
        raise PipelineError(
            f"the plan needs {need / GIB:.1f} GiB of memory and this machine has {plan['gpu_memory'] / GIB:.1f} GiB "
            f"(the frozen target's activations alone {plan['memory_per_gpu']['target_activations'] / GIB:.1f} GiB); "
            "lower trainer.batch_size or trainer.max_seq_len (dry_run=true prints the plan), or set "
            "plan.check_memory=false to run it anyway"
        )


def _check_chat_template(cfg: RunConfig) -> None:
    """A target declaring no chat template (a GGUF's header, a local directory's tokenizer files: a base model)
    reads raw text to continue: chat prompts and Magpie are refused now, naming the first chat row and the two ways
    out, not after minutes of dequantizing and loading. Prompts on the Hub are checked row by row as distill reads
    them."""
    from distill.prompts.chat import NO_TEMPLATE, is_text
    from distill.prompts.magpie import NEEDS_INSTRUCT, NO_MAGPIE_FIX
    from distill.targets import declared_tokenizer, source_of

    declared = declared_tokenizer(cfg.target)
    if cfg.target.chat_template or declared is None or declared["chat_template"]:
        return
    where = "its GGUF header declares none" if source_of(cfg.target) else "its tokenizer files declare none"
    distils = "distill" in cfg.stages and cfg.data.source == "target"
    if distils and cfg.data.prompts == "magpie":
        raise PipelineError(
            f"data.prompts=magpie: target {cfg.target.name_or_path} has no chat template ({where}); {NEEDS_INSTRUCT}; "
            f"{NO_MAGPIE_FIX}"
        )
    for key, conversations in _local_prompts(cfg, distils):
        row = next((n for n, messages in enumerate(conversations, 1) if not is_text(messages)), None)
        if row is not None:
            raise PipelineError(f"{key} row {row} {NO_TEMPLATE} ({cfg.target.name_or_path}: {where})")


def _local_prompts(cfg: RunConfig, distils: bool):
    """(setting, conversations) of every prompt source read from this machine (files, prompt sets) a run uses."""
    from distill.prompts.read import load_conversations
    from distill.prompts.sets import is_prompt_set

    evaluates = "eval" in cfg.stages
    sources = []
    if distils or (evaluates and not cfg.eval_prompts):  # eval's held-out slice of data.prompts too
        sources.append(("data.prompts", cfg.data.prompts, cfg.data.split, cfg.data.prompts_column))
    if distils:
        mix = enumerate(cfg.data.mix)
        sources += [(f"data.mix[{i}].prompts", m.prompts, m.split, m.prompts_column) for i, m in mix]
    if evaluates and cfg.eval_prompts:
        sources.append(("eval_prompts", cfg.eval_prompts, cfg.eval_split, cfg.eval_prompts_column))
    for key, source, split, column in sources:
        if is_prompt_set(source) or Path(source).expanduser().is_file():
            yield key, load_conversations(source, split, column=column, prompts_key=key)


def _check_against_target(family, cfg: RunConfig) -> None:
    """The family's target-dependent checks, from the target's config.json alone (no weights).

    A target whose config cannot be read offline (a hub id not yet downloaded) is checked when the
    train stage loads it instead."""
    from distill.targets.load import target_config

    try:
        config = target_config(cfg.target, cfg.target.trust_remote_code)
    except DistillError:
        return
    family.check_target(cfg.drafter, config)
    text = config.get_text_config()
    for engine in sorted({cfg.eval.serve, *cfg.publish.engines} - {None}):
        consumer = next((c for c in family.consumers if c.engine == engine), None)
        if consumer is not None and (why := consumer.refuse_settings(cfg.drafter, text)):
            raise PipelineError(f"{ENGINE_NAMES.get(engine, engine)} cannot serve this drafter: {why}")
    if hasattr(cfg.drafter, "intermediate_size") and not cfg.drafter.intermediate_size:
        if getattr(text, "intermediate_size", None) is None:
            raise PipelineError(
                f"target {cfg.target.name_or_path}'s config ({type(text).__name__}) has no intermediate_size, which "
                f"the {family.kind} drafter's MLP copies by default; set drafter.intermediate_size "
                f"(e.g. {4 * text.hidden_size}, 4 × its hidden_size)"
            )
    _check_tokenizer(cfg, text)


def _check_tokenizer(cfg: RunConfig, text_config) -> None:
    """The target's tokenizer against its config and the drafter's init: what would fail only after distilling.

    A toy world not built yet is not built here (minutes, before settings checked later could refuse the run):
    drafthub builds its tokenizer to fit."""
    from distill.targets import resolve_built_target
    from distill.targets.load import eos_token_ids_of, load_tokenizer

    target = resolve_built_target(cfg.target)
    if target is None or not Path(target).is_dir():
        _check_token_roles(cfg, _declared_roles(cfg))  # a GGUF's header names its special ids
        return  # a Hub id not downloaded yet (the distill stage loads and checks it), or a toy world to build
    tokenizer = load_tokenizer(cfg.target)
    _check_token_roles(cfg, _token_roles(tokenizer, eos_token_ids_of(cfg.target, tokenizer)))
    if not {i for i in eos_token_ids_of(cfg.target, tokenizer) if i is not None}:
        raise PipelineError(
            f"target {cfg.target.name_or_path} names no end-of-sequence token (no eos_token in its tokenizer, no "
            "eos_token_id in generation_config.json), so its answers would never end; add eos_token_id to its "
            "generation_config.json"
        )
    if len(tokenizer) > text_config.vocab_size:
        raise PipelineError(
            f"the tokenizer of {cfg.target.name_or_path} has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{text_config.vocab_size}: ids past it have no embedding; use the tokenizer saved with these weights"
        )
    init = getattr(cfg.drafter, "init", None) and resolve_built_target(cfg.drafter.init)
    if init and Path(init).is_dir():
        _check_init(cfg, Path(init), tokenizer)


def _check_init(cfg: RunConfig, init: Path, tokenizer) -> None:
    """drafter.init on this machine against the target, from its files alone (what loading it for training would
    refuse): the target's tokenizer shipped beside it, an embedding row for every target token and for every
    token-id setting."""
    from transformers import AutoConfig

    from heads.draft_lm import check_vocab
    from heads.pard import check_mask_token

    if tokenizer_matches(init, tokenizer) is False:
        raise PipelineError(
            f"drafter.init={cfg.drafter.init} has another vocabulary than target {cfg.target.name_or_path}: its drafts "
            "would mean other text; pick a drafter model with the target's tokenizer (a smaller model of its family)"
        )
    config = AutoConfig.from_pretrained(init, trust_remote_code=cfg.target.trust_remote_code)
    rows = config.get_text_config().vocab_size
    check_vocab(str(init), rows, tokenizer, trust_remote_code=cfg.target.trust_remote_code)
    for key in TOKEN_ID_SETTINGS:
        if (token_id := getattr(cfg.drafter, key, None)) is not None:
            check_mask_token(token_id, rows, f"drafter.{key} (drafter.init={cfg.drafter.init})")


# drafter settings that give a token id a role (the id a mask or PARD slot is fed), whichever family has them
TOKEN_ID_SETTINGS = ("mask_token_id", "pard_token")
REFUSED_ROLES = ("bos", "eos", "eot", "eom", "chat template marker")  # ids the target reads or writes in real text


def _token_roles(tokenizer, eos_ids) -> dict[int, str]:
    """The target's ids that have a role: start, end (every id that ends an answer), pad, unknown, and the special
    tokens its chat template writes (<|im_start|>, <start_of_turn>)."""
    roles = {}
    for token in tokenizer.all_special_tokens + [t.content for t in tokenizer.added_tokens_decoder.values()]:
        if tokenizer.chat_template and token in tokenizer.chat_template:
            roles[tokenizer.convert_tokens_to_ids(token)] = "chat template marker"
    for role, token_id in (("pad", tokenizer.pad_token_id), ("unknown", tokenizer.unk_token_id)):
        if token_id is not None:
            roles[token_id] = role
    roles |= {i: "eos" for i in eos_ids if i is not None}
    if tokenizer.bos_token_id is not None:
        roles[tokenizer.bos_token_id] = "bos"
    return roles


def _declared_roles(cfg: RunConfig) -> dict[int, str]:
    """The ids a target not loaded yet declares a role for (a GGUF's header); {} where only loading would tell."""
    from distill.targets import declared_tokenizer

    if all(getattr(cfg.drafter, key, None) is None for key in TOKEN_ID_SETTINGS):
        return {}
    declared = declared_tokenizer(cfg.target) or {}
    return {token_id: role for role, token_id in declared.get("special_ids", {}).items()}


def _check_token_roles(cfg: RunConfig, roles: dict[int, str]) -> None:
    """A token-id setting that names one of the target's role ids: refused where the target reads or writes it in
    real text (a drafter fed it as a mask would take it for the token itself); said once, and allowed, for pad and
    unknown, which real text never holds."""
    for key in TOKEN_ID_SETTINGS:
        token_id = getattr(cfg.drafter, key, None)
        role = roles.get(token_id) if token_id is not None else None
        if role in REFUSED_ROLES:
            raise PipelineError(
                f"drafter.{key}={token_id} is the target's {role} token, which real text holds: the drafter could not "
                f"tell a mask slot from it; leave drafter.{key} unset (an id the data never holds is picked) or give "
                "an unused one"
            )
        if role is not None:
            print(
                f"[preflight] drafter.{key}={token_id} is the target's {role} token: allowed (real text never holds it)"
            )


def _check_training(setup, kind: str, trainer) -> None:
    """The loss and policy the family's objective implements; anything else is refused, never ignored."""
    if trainer.loss not in LOSSES:
        raise PipelineError(f"trainer.loss={trainer.loss!r} is not a loss; use one of {list(LOSSES)}")
    if trainer.loss not in setup.losses:
        raise PipelineError(
            f"trainer.loss={trainer.loss} is not implemented for {kind} drafters; use one of {list(setup.losses)}"
        )
    if trainer.kd_top_k and not (setup.top_k_targets and trainer.loss == "fkl"):
        raise PipelineError(
            f"trainer.kd_top_k={trainer.kd_top_k} cuts the target's distribution for EAGLE-3's loss fkl only, not "
            f"for {kind} with loss {trainer.loss}; set trainer.kd_top_k=0"
        )
    if trainer.optimizer not in OPTIMIZERS:
        raise PipelineError(f"trainer.optimizer={trainer.optimizer!r}; use one of {list(OPTIMIZERS)}")
    if trainer.policy not in POLICIES:
        raise PipelineError(f"trainer.policy={trainer.policy!r}; use one of {list(POLICIES)}")
    if trainer.policy == "on_policy" and setup.off_policy_only:
        raise PipelineError(
            f"trainer.policy=on_policy is not available for {kind} drafters: {setup.off_policy_only}; "
            "use trainer.policy=off_policy"
        )
    if trainer.policy == "on_policy" and trainer.loss == "ce":
        raise PipelineError(
            "trainer.loss=ce learns the sampled tokens, and on-policy tokens are the drafter's own; "
            "use a loss against the target's distribution (fkl, rkl, jsd, tvd or al)"
        )
    if trainer.policy == "on_policy" and trainer.on_policy_rollout not in setup.on_policy_rollouts:
        raise PipelineError(
            f"trainer.on_policy_rollout={trainer.on_policy_rollout!r} is not available for {kind} drafters; "
            f"use one of {[r for r in ROLLOUTS if r in setup.on_policy_rollouts]}"
        )
    if problem := schedule_problem(trainer):
        raise PipelineError(problem)
    if trainer.continue_from and not trainer.resume:
        raise PipelineError(
            "trainer.continue_from starts from the earlier run's checkpoint, which trainer.resume=false would not "
            "load; drop trainer.resume=false"
        )
    if not 0 < trainer.on_policy_fraction <= 1:
        raise PipelineError(f"trainer.on_policy_fraction={trainer.on_policy_fraction} must be in (0, 1]")
    if trainer.on_policy_temperature < 0 or trainer.acceptance_gamma < 1:
        raise PipelineError("trainer.on_policy_temperature must be ≥ 0 and trainer.acceptance_gamma ≥ 1")


def _check_launch(cfg: RunConfig, setup, kind: str) -> None:
    """What `accelerate launch` decides (WORLD_SIZE, its DeepSpeed or FSDP environment) against the trainer's
    settings: refused before distilling, not when training starts (every launched process reads the same)."""
    from train.distributed import check_batch_split, launched_processes, launcher_from_env
    from train.sharded_target import checked_sharding

    if "train" not in cfg.stages:
        return
    processes = launched_processes()
    check_batch_split(cfg.trainer.batch_size, processes)
    if getattr(cfg.drafter, "features", None) != "vllm":  # vLLM's features: the target is never sharded in training
        setting = cfg.trainer.target_sharding
        checked_sharding(setting, processes, launcher_from_env(), kind, setup.whole_target_only)


def _check_features(cfg: RunConfig) -> None:
    """drafter.features=vllm trains without the target's decoder layers: nothing may need its forward, and vLLM
    must be there to compute them."""
    from distill.features.vllm import NEEDS_VLLM

    if getattr(cfg.drafter, "features", None) != "vllm":
        return
    if cfg.trainer.policy == "on_policy":
        raise PipelineError(
            "trainer.policy=on_policy scores the drafter's own drafts with the target's forward, and "
            "drafter.features=vllm loads none of its layers in training; use drafter.features=online or offline"
        )
    if cfg.trainer.target_sharding not in ("auto", "replicate"):
        raise PipelineError(
            f"trainer.target_sharding={cfg.trainer.target_sharding}: with drafter.features=vllm training holds only "
            "the target's embeddings and lm_head (nothing to shard); set trainer.target_sharding=auto"
        )
    if "distill" in cfg.stages and not cfg.dry_run and importlib.util.find_spec("vllm") is None:
        raise PipelineError(NEEDS_VLLM)
