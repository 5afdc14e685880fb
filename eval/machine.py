"""How fast this machine is against the reference machine, from a fixed workload of about 13 seconds.

Two machines of one class differ up to 2× (2-core AVX2 EPYCs decoding SmolLM2 plainly at 7.8 and at 14–22 tok/s), so a
time budget, a ceiling or a benchmark's time means something only beside the speed of the machine that took it. The
workload does what the test suite and the benchmarks spend their time on, on 2 threads (the reference machine's
cores): fp32 matrix products (training, prefill, verification) and a greedy KV-cached decode of a model shaped like
the micro toy target (the decode loops' Python and dispatch overhead). `speed` is the geometric mean of the two
rates, each over the reference machine's: at 0.6 this machine takes 1/0.6 = 1.67× the reference machine's time, and a
time t taken here is t × 0.6 reference seconds.

A speed outside TRUSTED is reported and not trusted (the probe was disturbed, or the machine is too unlike the
reference for one figure to carry times across): a time gate then reports and does not judge.

    python -m eval.machine          # the line, then its JSON

DRAFTHUB_MACHINE_SPEED holds a measurement (`Measurement.to_json`) taken earlier in the same run: the test suite
measures once, before its workers start, and they and the programs they launch inherit it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ENV = "DRAFTHUB_MACHINE_SPEED"
TRUSTED = (0.3, 3.0)  # speeds a time gate trusts; outside, it reports and does not judge
THREADS = 2  # the reference machine's cores: the figure compares like with like on a larger machine
# The workload, fixed: changing any of it moves every machine's figure, so REFERENCE must be measured again.
MATMUL = (256, 1024, 1024)  # (M, K, N), fp32: a block of a small model's forward
MATMULS_PER_ROUND = 40
DECODE_TOKENS = 256
DECODER = dict(  # the micro toy target's shape (distill/toyworld/config.py MICRO), fixed here: a rebuilt world
    vocab_size=512,  # must not move the reference
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
ROUNDS = 15  # rounds of both parts; each part's figure is its median round


@dataclass(frozen=True)
class Reference:
    """The machine the suite's MEASURED_S and budgets were measured on (tests/suite_report.py)."""

    name: str
    measured: str  # when, at which commit
    matmul_gflops: float
    decode_tok_s: float
    smollm2_tok_s: float  # its plain decoding speed of SmolLM2-135M-Instruct (the README's figures)


REFERENCE = Reference(  # medians of 33 measurements over 75 minutes, quiet (standalone and at both ends of the suite)
    name="2-core AMD EPYC, AVX-512 with BF16, no AMX",
    measured="2026-12-02 (the machine CI ran on that day)",
    matmul_gflops=117.6,  # the 33 ranged 86–173: this VM's speed moves from minute to minute
    decode_tok_s=909.0,  # ranged 710–1382
    smollm2_tok_s=12.5,  # fp32, 2 threads, 128 tokens after a 64-token prompt, KV-cached greedy
)


@dataclass(frozen=True)
class Measurement:
    machine: str  # cores, CPU model and class
    cpu_class: str  # AVX2 | AVX-512 | AVX-512 with BF16 | AMX | …
    threads: int
    matmul_gflops: float
    decode_tok_s: float
    speed: float  # geometric mean of the two rates over the reference's (1 = the reference machine)
    seconds: float  # what measuring took

    @property
    def trusted(self) -> bool:
        return TRUSTED[0] <= self.speed <= TRUSTED[1]

    def reference_seconds(self, seconds: float) -> float:
        """A time taken here, in the reference machine's seconds (normalized)."""
        return seconds * self.speed

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"trusted": self.trusted})

    @classmethod
    def from_json(cls, text: str) -> Measurement:
        fields = json.loads(text)
        fields.pop("trusted", None)  # derived
        return cls(**fields)

    def line(self) -> str:
        """One line: this machine, its figures and speed, beside the reference machine's."""
        ref = REFERENCE
        verdict = "" if self.trusted else f" — outside {TRUSTED[0]}–{TRUSTED[1]}×: not trusted, time gates only report"
        return (
            f"[machine] {self.machine}: matmul {self.matmul_gflops:.1f} GFLOP/s, micro decode {self.decode_tok_s:.0f} "
            f"tok/s ({self.threads} threads) = speed {self.speed:.2f}× the reference machine ({ref.name}: "
            f"{ref.matmul_gflops:.1f} GFLOP/s, {ref.decode_tok_s:.0f} tok/s; SmolLM2 plain {ref.smollm2_tok_s:.1f} "
            f"tok/s){verdict}"
        )


def cpu_class(flags: set[str]) -> str:
    """The class timings are quoted by (`lscpu` flags): what the matrix kernels can use."""
    if "amx_tile" in flags:
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512 with BF16" if "avx512_bf16" in flags else "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    if {"asimd", "sve"} & flags:
        return "Arm " + ("SVE" if "sve" in flags else "NEON")
    return "no AVX2"


def describe() -> tuple[str, str]:
    """(the machine in words, its class): cores, CPU model, class."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in info.splitlines()) if k.strip() and v
    )
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    model = fields.get("model name") or platform.processor() or platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    klass = cpu_class(flags)
    return f"{cores}-core {model}, {klass}", klass


def _decoder(seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)  # the weights do not change the work; a seed keeps the tokens (and so the run) fixed
    return LlamaForCausalLM(LlamaConfig(**DECODER)).eval()


@torch.inference_mode()
def _decode(model, prompt: torch.Tensor) -> float:
    """Seconds for DECODE_TOKENS greedy KV-cached tokens after a prefill of `prompt`."""
    from transformers import DynamicCache

    t0 = time.perf_counter()
    cache = DynamicCache()
    logits = model(prompt, past_key_values=cache, use_cache=True).logits
    for _ in range(DECODE_TOKENS):
        token = logits[:, -1:].argmax(-1)  # stays on the device: no host sync per token
        logits = model(token, past_key_values=cache, use_cache=True).logits
    return time.perf_counter() - t0


@torch.inference_mode()
def _matmuls(a: torch.Tensor, b: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for _ in range(MATMULS_PER_ROUND):
        torch.mm(a, b)
    return time.perf_counter() - t0


def measure(rounds: int = ROUNDS) -> Measurement:
    """Run the workload on min(THREADS, cores) threads. Each round allocates its tensors and model afresh (a matrix
    product's rate here moved 90–160 GFLOP/s with where its operands landed) and runs both parts, so a passing
    disturbance hits both; each part's figure is its median round."""
    t_start, threads_before = time.perf_counter(), torch.get_num_threads()
    threads = min(THREADS, os.cpu_count() or 1)
    torch.set_num_threads(threads)
    m, k, n = MATMUL
    mm, dec = [], []
    try:
        for r in range(rounds + 1):  # round 0 warms up: first-call allocation and dispatch
            gen = torch.Generator().manual_seed(r)
            a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
            model, prompt = _decoder(r), torch.randint(0, DECODER["vocab_size"], (1, 16), generator=gen)
            gflops, tok_s = (
                2 * m * k * n * MATMULS_PER_ROUND / _matmuls(a, b) / 1e9,
                DECODE_TOKENS / _decode(model, prompt),
            )
            if r:
                mm.append(gflops), dec.append(tok_s)
    finally:
        torch.set_num_threads(threads_before)
    gflops, tok_s = statistics.median(mm), statistics.median(dec)
    return Measurement(
        *describe(),
        threads=threads,
        matmul_gflops=round(gflops, 2),
        decode_tok_s=round(tok_s, 1),
        speed=round(speed_of(gflops, tok_s), 3),
        seconds=round(time.perf_counter() - t_start, 1),
    )


def speed_of(matmul_gflops: float, decode_tok_s: float) -> float:
    """The geometric mean of the two rates over the reference machine's (1.0 where no reference is recorded yet)."""
    if not (REFERENCE.matmul_gflops and REFERENCE.decode_tok_s):
        return 1.0
    return math.sqrt(matmul_gflops / REFERENCE.matmul_gflops * decode_tok_s / REFERENCE.decode_tok_s)


def slower(first: Measurement, last: Measurement) -> Measurement:
    """Of a run's measurements at its start and its end, the slower. On the reference machine (a VM) one measurement
    read up to 1.5× another minutes apart while the suite's time moved by a tenth: a gate that must never fail a run
    for a slow machine gives it the benefit of that doubt."""
    return min(first, last, key=lambda found: found.speed)


def inherited() -> Measurement | None:
    """The measurement an enclosing run took ($DRAFTHUB_MACHINE_SPEED), if any."""
    text = os.environ.get(ENV)
    return Measurement.from_json(text) if text else None


def current() -> Measurement:
    """The enclosing run's measurement, else one taken now and handed to the programs this one starts."""
    found = inherited()
    if found is None:
        found = measure()
        os.environ[ENV] = found.to_json()
    return found


def announce() -> Measurement:
    """At a benchmark's start: the machine's line on stderr (its stdout is its JSON line)."""
    import sys

    found = current()
    print(found.line(), file=sys.stderr, flush=True)
    return found


def with_machine(result: dict) -> dict:
    """A benchmark's JSON line with the machine it was measured on (its class and speed beside the reference's)."""
    found = current()
    return result | {"machine": asdict(found) | {"trusted": found.trusted, "reference": asdict(REFERENCE)}}


if __name__ == "__main__":
    found = current()
    print(found.line())
    print(found.to_json())
