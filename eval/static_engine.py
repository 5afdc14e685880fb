"""The static-shape, compiled engine path (gpt-fast's approach) and the rule that picks it.

Per-forward framework overhead dominates small models on CPU and a small drafter on a GPU: with a
growing DynamicCache every forward has new shapes, so nothing can be compiled or captured. Here
each model gets a KV cache pre-allocated once (transformers' StaticCache, indexed by position)
and runs a few fixed block widths (1 for decoding and the drafter's catch-up, 2 for a draft LM's
catch-up after a fully accepted step, γ + 1 for verification), each compiled once with
`torch.compile` (CUDA graphs on a GPU). Widths in between are padded up to the next fixed one.
Prompts (prefill) run eagerly on the same cache.

The cache rule — why rejected and padded slots need no cleanup. A forward over a block of width
m at verified length L writes slots L … L+m−1 before any of its queries read, and a query at
position p reads only slots ≤ p (the causal mask over absolute positions). Rolling back is just
setting L. So a slot past L (a rejected draft, padding) is always rewritten by the next forward
that could read it: the cache equals a fresh recompute over the verified tokens (tested).

Drafters that read the target's hidden states (Medusa, EAGLE, DFlash, DSpark) run on it too: the target's
graphs are compiled a second time returning every layer's states (HF's hidden_states), and plain decoding keeps
the graphs without them. Layer id N (the last layer's output before the final norm, which HF's hidden_states
replace by the normed one) comes from a forward hook registered before compiling: dynamo traces it into the graph.
What it does not cover — token trees, batches of rows, models without static-cache support — runs on the dynamic
path (eval/kv_cache.py); `choose_engine` says which path runs and why, and the report names it.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch._inductor import config as inductor_config

from eval.errors import EvalError
from eval.kv_cache import SlotCache
from heads.cache import use_compile_cache

ENGINES = ("auto", "static", "dynamic")
# What compiling one block width of a target costs on a CPU, roughly: inductor's freezing (the weights pre-packed into
# the graph, what makes the compiled step 2-3x faster) bypasses its FX graph cache, so every run compiles and
# autotunes again: SmolLM2-135M on 2 AVX-512 cores took 299 s for widths 1 and 5 with an empty cache and 195 s with
# a warm one (without freezing 124 / 27 s, but no faster than eager). auto's estimate of whether compiling can pay.
COMPILE_SECONDS_PER_WIDTH = 100.0


class StaticModel:
    """One model's pre-allocated cache and its forwards compiled once per fixed block width."""

    def __init__(self, model, max_len: int, widths: tuple[int, ...], compile: bool = True, features=False):
        from transformers import StaticCache

        self.model, self.max_len, self.widths = model, max_len, tuple(sorted(set(widths)))
        # a target whose drafter reads its hidden states (features: True, or the layer ids it reads): every width also
        # compiled returning them (plain decoding, the baseline, keeps the graphs without them)
        self.features = bool(features)
        # layer id N (the last layer's output before the final norm, which HF's hidden_states replace by the normed
        # one): a forward hook registered before compiling, so the graph returns it (dynamo traces the hook)
        self.last: dict = {}  # the hook's only reference: the model does not keep this StaticModel alive
        self.keeps_last = not isinstance(features, bool) and model.config.num_hidden_layers in features
        self._hook = None
        if self.keeps_last:
            last, layer = self.last, model.get_decoder().layers[-1]
            self._hook = layer.register_forward_hook(lambda module, args, out: last.__setitem__("N", _first(out)))
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        device = next(model.parameters()).device
        # GPU: CUDA graphs replay a captured launch sequence, the launch overhead gone. CPU: the weights frozen
        # into the graph (pre-packed for oneDNN) and GEMM kernels autotuned: ~4× faster than eager on the toy
        # target, for ~20-35 s of compiling per width (cached on disk by inductor for later runs).
        self.on_gpu = on_gpu = device.type == "cuda"
        mode = "reduce-overhead" if on_gpu else None
        # Autotuning asks only inductor's C++ micro-GEMMs: they beat MKL at every shape of SmolLM2 autotuned on AVX2
        # (2-3x on these skinny products), and benchmarking MKL too took a fifth of the compile (170 -> 131 s for
        # width 1 on AVX2, the step as fast); `Engine.settle`'s probe still keeps eager where compiling loses.
        self.inductor = {} if on_gpu else {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}
        if compile:
            use_compile_cache()  # kernels kept between runs, keyed by torch and the CPU class
        compiled = torch.compile(model.forward, dynamic=False, fullgraph=True, mode=mode) if compile else None
        self.forward_compiled = compiled
        self.compile_seconds = 0.0
        self.slots = torch.arange(max_len, device=device)
        # allocate the cache now: compiling against an uninitialised one would recompile. With features, eagerly
        # asking for the hidden states also installs transformers' output-capturing hooks, which it does under a
        # threading lock on the first such call: dynamo cannot trace that lock (seen on an H200, transformers 5.17)
        self._forward(model, torch.zeros(1, 1, dtype=torch.long, device=device), 0, hidden_states=self.features)
        # Each (model, width) is one compiled graph of transformers' shared forward wrapper: a drafter and a
        # target over a γ sweep need more than dynamo's default of 8 per function.
        limit = 4 * len(self.widths) + 8
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)

    def close(self) -> None:
        """Remove the layer-N hook from the model (a static path not taken)."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def width_for(self, m: int) -> Optional[int]:
        """The fixed width a block of m tokens runs at (padded up), or None: run eagerly (a prompt)."""
        return next((w for w in self.widths if w >= m), None)

    def run(
        self, input_ids: torch.Tensor, start: int, hidden_states: bool = False, logits_to_keep: int = 0
    ) -> "_Output":
        """Forward a (1, m) block at positions start … start+m−1: logits (1, m, V) for the real tokens, and with
        hidden_states (a model built with features) every layer's states (1, m, H) as HF's hidden_states.
        logits_to_keep: a prompt's eager forward computes only the last ones (0: all; compiled widths keep all)."""
        if hidden_states and not self.features:
            raise EvalError("the static engine was built without the target's features (a bug if seen)")
        m = input_ids.shape[1]
        width = self.width_for(m)
        if width is None:  # a prompt: eager, at its own length (the LM head over its last positions alone)
            out = self._forward(self.model, input_ids, start, hidden_states, logits_to_keep)
            return _Output.of(out, last=self.last.pop("N", None))
        if width > m:  # padding: its slots lie past the verified length, rewritten before they are read
            input_ids = torch.cat([input_ids, input_ids.new_zeros(1, width - m)], dim=1)
        if self.on_gpu and self.forward_compiled is not None:
            # A CUDA graph's outputs live in buffers its next replay overwrites: a new step, and a copy kept.
            torch.compiler.cudagraph_mark_step_begin()
            out = self._forward(self.forward_compiled, input_ids, start, hidden_states)
            return _Output.of(out, m, copy=True, last=self.last.pop("N", None))
        out = self._forward(self.forward_compiled or self.model, input_ids, start, hidden_states)
        return _Output.of(out, m, last=self.last.pop("N", None))

    def _forward(self, forward, input_ids: torch.Tensor, start: int, hidden_states: bool = False, logits_to_keep=0):
        """One forward at positions start …; the mask shows the slots up to the block's end (a static shape).

        Without it transformers would skip the mask of a one-token query and attend to all max_len slots.
        """
        mask = (self.slots < start + input_ids.shape[1])[None].long()  # (1, max_len)
        # Always in inference mode: the grad mode is part of what a compiled graph is specialised on, and
        # the cache, allocated in it, may only be written in it (its lengths too: on a GPU, with transformers
        # 5.17, a fill_ outside raised "Inplace update to inference tensor outside InferenceMode").
        with torch.inference_mode(), inductor_config.patch(self.inductor):
            self._set_length(start)
            ids, mask = input_ids.clone(), mask.clone()  # inference tensors too: that is guarded on
            return forward(
                input_ids=ids,
                attention_mask=mask,
                past_key_values=self.cache,
                use_cache=True,
                output_hidden_states=hidden_states,
                **({"logits_to_keep": logits_to_keep} if logits_to_keep else {}),  # never traced: graphs keep all
            )

    def precompile(self) -> float:
        """Compile every fixed width now, on dummy tokens; returns the seconds it took (kept out of throughput)."""
        if self.forward_compiled is None:
            return 0.0
        device = next(self.model.parameters()).device
        t0 = time.perf_counter()
        for w in self.widths:
            for hidden in (False, True) if self.features else (False,):
                for _ in range(3):  # CUDA graphs record on a later call than the first
                    self.run(torch.zeros(1, w, dtype=torch.long, device=device), 0, hidden)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.compile_seconds += time.perf_counter() - t0
        return time.perf_counter() - t0

    def _set_length(self, length: int) -> None:
        if length + max(self.widths) > self.max_len:
            raise EvalError(
                f"the static engine's cache holds {self.max_len} tokens and this sequence needs more; "
                "set eval.engine=dynamic"
            )
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(length)  # where the next block is written


class StaticSlotCache:
    """SlotCache's interface for one row decoding chains, on a StaticModel (see the module docstring)."""

    dense = True

    def __init__(self, static: StaticModel, device: torch.device):
        self.static, self.device, self.length = static, device, 0

    def lengths(self) -> list[int]:
        return [self.length]

    @property
    def keeps_last(self) -> bool:
        """Its outputs carry layer id N (`last_layer`): the caller registers no hook of its own."""
        return self.static.keeps_last

    def forward(self, model, input_ids: torch.Tensor, parents=None, input_valid=None, **kwargs):
        if parents is not None or input_valid is not None or input_ids.shape[0] != 1:
            raise EvalError("the static engine decodes one row of chains (a bug if seen)")
        keep = kwargs.get("logits_to_keep") or 0
        out = self.static.run(input_ids, self.length, bool(kwargs.get("output_hidden_states")), keep)
        self.length += input_ids.shape[1]
        return (
            out if kwargs.get("logits_to_keep") != 1 else _Output(out.logits[:, -1:], out.hidden_states, out.last_layer)
        )

    def feed(self, model, rows: list[list[int]], **kwargs):
        return self.forward(model, torch.tensor(rows, device=self.device), **kwargs)

    def run_width(self, m: int) -> int:
        """m: the compiled model pads a block to its next fixed width itself."""
        return m

    def rollback(self, num_valid: list[int]) -> None:
        self.length = min(self.length, num_valid[0])

    def keep_last(self, kept: list[list[int]], width: int) -> None:
        """A chain keeps a prefix of its last block: the verified length moves; the rest is rewritten later."""
        if kept[0] != list(range(len(kept[0]))):
            raise EvalError("the static engine keeps chain prefixes only (a bug if seen)")
        self.length = self.length - width + len(kept[0])


@dataclass
class _Output:
    logits: torch.Tensor
    hidden_states: Optional[tuple] = None
    last_layer: Optional[torch.Tensor] = None  # layer id N's output before the final norm, where it was kept

    @classmethod
    def of(cls, out, m: Optional[int] = None, copy: bool = False, last=None) -> "_Output":
        """A model output's logits and hidden states (and layer N's output), cut to the first m positions (None:
        all), copied if asked."""

        def cut(t: torch.Tensor) -> torch.Tensor:
            t = t if m is None else t[:, :m]
            return t.clone() if copy else t

        states = getattr(out, "hidden_states", None)
        return cls(
            cut(out.logits), None if states is None else tuple(map(cut, states)), None if last is None else cut(last)
        )


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@dataclass
class Engine:
    """Which path decodes: `dynamic` (DynamicCache + slot masks, everything) or `static` (compiled)."""

    name: str
    reason: str
    max_len: int = 0
    widths: tuple[int, ...] = ()
    compile: bool = True
    probe: bool = False  # auto on a CPU: the static path is kept only if `settle` measures it faster
    measured: dict = field(default_factory=dict)  # the probe's figures (ms per plain step each way), for the report
    # dynamic path: a verification block of m tokens runs padded to verify_widths[m] (measured faster; `settle`)
    verify_widths: dict = field(default_factory=dict)
    _models: dict = field(default_factory=dict)  # id(model) → (weakref, StaticModel)

    @property
    def static(self) -> bool:
        return self.name == "static"

    def cache(self, model, batch_size: int, device: torch.device, widths: Optional[tuple[int, ...]] = None):
        """A fresh cache for `model` on this path (the static path reuses the model's pre-allocated one)."""
        if not self.static:
            return SlotCache(batch_size, device, self.verify_widths)
        return StaticSlotCache(self.static_model(model, widths), device)

    def static_model(self, model, widths: Optional[tuple[int, ...]] = None, features=False) -> StaticModel:
        """`model`'s static twin, built on first use (features: True or the layer ids a drafter reads: also compiled
        returning its hidden states, and layer id N's output where it is among them)."""
        entry = self._models.get(id(model))
        if entry is None or entry[0]() is not model:
            static = StaticModel(model, self.max_len, widths or self.widths, self.compile, features)
            entry = (weakref.ref(model), static)
            self._models[id(model)] = entry
        return entry[1]

    def precompile(self) -> float:
        """Compile every model's fixed widths; the seconds it took (reported apart, as gpt-fast does)."""
        return sum(static.precompile() for _, static in self._models.values())

    @property
    def compile_seconds(self) -> float:
        return sum(static.compile_seconds for _, static in self._models.values())

    def describe(self) -> dict:
        return {
            "path": "static-compiled" if self.static else "dynamic",
            "reason": self.reason,
            "block_widths": list(self.widths),
            "compile_seconds": round(self.compile_seconds + self.measured.get("compile_seconds", 0.0), 2),
            **({"probe": self.measured} if self.measured else {}),
            **({"verify_widths": {str(m): w for m, w in self.verify_widths.items()}} if self.verify_widths else {}),
        }

    def settle(self, target, features=False, decode_tokens: int = 0, steps: int = 12, margin: float = 0.9) -> "Engine":
        """A probing engine (auto on a CPU): the faster path for this eval. An eager plain step is timed first;
        where even halving it over the eval's `decode_tokens` (every decode, both baselines and each γ) would not
        repay compiling every width, it stays dynamic without compiling. Otherwise width 1 is compiled and timed
        too, and the static path is kept where it takes at most `margin` of the eager step's time.
        features: the layer ids the drafter reads of the target (the static target is built returning them)."""
        if not self.probe:
            return self
        eager = _plain_step_ms(target, SlotCache(1, _device(target)), steps)
        compile_s = COMPILE_SECONDS_PER_WIDTH * len(self.widths) * (2 if features else 1)  # hidden states: twice
        if eager * decode_tokens / 2000 < compile_s:
            reason = (
                f"auto on a CPU: a plain step takes {eager:.1f} ms eager, so compiling {len(self.widths)} block "
                f"widths (~{compile_s:.0f} s) cannot pay back within this eval's {decode_tokens} decoded tokens"
            )
            return _dynamic(target, reason, {"eager_ms": round(eager, 2)}, max(self.widths), steps, decode_tokens)
        static = self.static_model(target, features=features)
        t0 = time.perf_counter()
        for _ in range(3):  # width 1 compiled (the other widths only if the static path is kept)
            static.run(torch.zeros(1, 1, dtype=torch.long, device=_device(target)), 0)
        compile_seconds = time.perf_counter() - t0
        static.compile_seconds += compile_seconds
        context = max(1, min(64, self.max_len - max(self.widths) - steps - 4))  # within the cache it was sized
        compiled = _plain_step_ms(target, StaticSlotCache(static, _device(target)), steps, context)
        compiled, eager = round(compiled, 2), round(eager, 2)  # one figure in the reason and the report alike
        self.measured = {"compiled_ms": compiled, "eager_ms": eager}
        self.probe = False
        if compiled <= margin * eager:
            self.reason = f"auto on a CPU: a plain step measured {compiled:.1f} ms compiled, {eager:.1f} ms eager"
            return self
        self.measured["compile_seconds"] = compile_seconds  # spent, though the dynamic path decodes
        for _, model in self._models.values():
            model.close()
        self._models.clear()
        reason = f"auto on a CPU: a plain step measured {eager:.1f} ms eager, {compiled:.1f} ms compiled"
        return _dynamic(target, reason, self.measured, max(self.widths), steps, decode_tokens)


DYNAMIC = Engine("dynamic", "default")
PAD_WIDTHS = 8  # widths timed at least up to this: a γ 2 block (3 tokens) may run faster as 5
PAD_PAYBACK = 10  # widths are timed only in an eval decoding this many times the forwards timing them takes


def _dynamic(target, reason: str, measured: dict, max_width: int, steps: int, decode_tokens: int) -> Engine:
    """The dynamic path auto chose, with each verification width padded up where a wider block measured faster.
    Timing the widths takes ~max_width · steps forwards (11 s for SmolLM2 on 2 cores): an eval too short to win
    that back (a smoke run, a test) decodes unpadded."""
    width = max(max_width, PAD_WIDTHS)
    if decode_tokens < PAD_PAYBACK * width * (steps + 2):
        return Engine("dynamic", f"{reason}; widths not timed (too few tokens to repay it)", measured=measured)
    widths, times = padded_widths(target, width, steps)
    measured = measured | {"width_ms": {str(w): t for w, t in times.items()}}
    return Engine("dynamic", reason, measured=measured, verify_widths=widths)


@torch.inference_mode()
def padded_widths(target, max_width: int, steps: int, margin: float = 0.9) -> tuple[dict[int, int], dict[int, float]]:
    """Why: on a CPU a forward over a few tokens can take longer than over more (SmolLM2 on 2 AVX-512 cores: 2 and
    3 tokens 1.7× and 2.0× a plain step, 5 tokens 1.4×: the matmul kernels change with the row count). Each
    width 1..max_width is timed (the widths taking turns, median of `steps`); a block of m tokens is padded to the
    fastest wider width where that takes at most `margin` of m's time. Returns {m: padded width} for the m that
    pad, and the milliseconds per width."""
    device = _device(target)
    cache = SlotCache(1, device)
    cache.feed(target, [[1] * 64])
    samples: dict[int, list[float]] = {w: [] for w in range(1, max_width + 1)}
    for _ in range(steps + 2):
        for w in samples:
            t0 = time.perf_counter()
            cache.forward(target, torch.ones(1, w, dtype=torch.long, device=device))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            samples[w].append((time.perf_counter() - t0) * 1000)
            cache.rollback([64])
    # to the 0.01 ms a report shows: the table is then exactly what the reported times give (two widths that time
    # alike no longer pad one way here and the other way read back from the report)
    times = {w: round(sorted(t[2:])[len(t[2:]) // 2], 2) for w, t in samples.items()}
    return pad_table(times, margin), times


def pad_table(times: dict[int, float], margin: float = 0.9) -> dict[int, int]:
    """{m: w} for each width m whose fastest wider width w takes at most `margin` of m's time."""
    padded = {}
    for m in times:
        best = min((w for w in times if w >= m), key=times.get)
        if best != m and times[best] <= margin * times[m]:
            padded[m] = best
    return padded


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.inference_mode()
def _plain_step_ms(target, cache, steps: int, context: int = 64) -> float:
    """Median milliseconds of one plain decoding step (one token after `context` tokens) on `cache`'s path."""
    device = _device(target)
    cache.feed(target, [[1] * context])
    times = []
    for _ in range(steps + 2):  # two warm-up steps
        t0 = time.perf_counter()
        cache.forward(target, torch.ones(1, 1, dtype=torch.long, device=device))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1000)
    return sorted(times[2:])[len(times[2:]) // 2]


def choose_engine(
    setting: str, target, proposer, *, tree, batch_size: int, max_len: int, widths: tuple[int, ...]
) -> Engine:
    """The path this eval decodes on, and why (`eval.engine`: auto | static | dynamic).

    auto takes the static path where it covers the run on a GPU, where CUDA graphs remove the launch
    overhead that dominates a small drafter. On a CPU the answer depends on the model and the CPU (SmolLM2
    decodes 2.2× faster compiled; the toy target saves ~1.5 ms a forward), so auto returns a static engine
    to be measured (`probe`): `settle` times a plain step both ways and keeps the faster path.
    """
    if setting not in ENGINES:
        raise EvalError(f"eval.engine={setting!r}; use one of {list(ENGINES)}")
    if setting == "dynamic":
        return Engine("dynamic", "eval.engine=dynamic")
    gaps = []
    trees = proposer.tree_depth is not None if proposer.proposes_trees is None else proposer.proposes_trees
    if tree is not None or trees:
        gaps.append("token trees")
    if batch_size != 1:
        gaps.append(f"batches of {batch_size} rows")
    models = [target, *proposer.engine_models]
    gaps += [why for why in map(supports_static, models) if why]
    device = next(target.parameters()).device
    if gaps:
        if setting == "static":
            raise EvalError(f"eval.engine=static does not cover {'; '.join(gaps)}; use eval.engine=auto or dynamic")
        return Engine("dynamic", "the static path does not cover " + "; ".join(gaps))
    widths = tuple(sorted(set(widths)))
    if setting == "auto" and device.type != "cuda":  # measured before decoding: build_engine calls `settle`
        return Engine("static", "auto on a CPU: measured", max_len=max_len, widths=widths, probe=True)
    return Engine("static", f"eval.engine={setting}", max_len=max_len, widths=widths)


def supports_static(model) -> Optional[str]:
    """None when `model` can run on a StaticCache under torch.compile, else why not."""
    if not getattr(model, "_can_compile_fullgraph", False):
        return f"{type(model).__name__} does not support transformers' static cache under torch.compile"
    kinds = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"{type(model).__name__} has {sorted(kinds)} layers (the static path needs full attention)"
    return None
