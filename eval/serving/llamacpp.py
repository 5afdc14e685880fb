"""Serving truth with llama.cpp: `llama-server` serves the target's GGUF with the export's GGUF drafter (the
family's `--spec-type`), and its own counters are compared with ours.

Two servers run on loopback ports chosen free: the target with the drafter, and the target alone. Every prompt is
sent as token ids (`/completion`, greedy, no prompt cache), one request at a time; outputs are compared with the
target's greedy output token for token, and `/metrics` gives the same spec-decode counters vLLM keeps (drafts,
accepted, accepted per position, draft tokens). The speed-up is timed as for vLLM (eval/serving/base.py), each
prompt alone on both servers, interleaved. An output that leaves the target's greedy output is decoded again by
llama-server *without* the drafter: when both agree and the divergence is at a near-tie (the target's top two
logits within `NEAR_TIE` of each other at the first differing token, where float reordering alone flips a greedy
pick), speculation was lossless in llama.cpp and the difference is its arithmetic; it is reported as such, by
prompt and gap, and counted as equal. Any other difference breaks the verdict.

Servers are always stopped: on success, failure and Ctrl-C.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.serving.base import ours_section, served_figures, served_speed, verdict
from eval.serving.process import ServerExited, http_get, running_server
from heads.families import Export
from heads.formats import llamacpp
from heads.formats.fingerprint import served_files_hash

ENGINE = llamacpp.ENGINE
NEAR_TIE = 0.01  # logit gap below which a greedy pick may flip with the order of float additions
START_TIMEOUT_S = 300
NO_REPACK = "--no-repack"  # llama-server: the weights as stored, not repacked into the CPU's interleaved layouts
PER_POSITION = r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)$'


def missing_reason() -> Optional[str]:
    return llamacpp.programs.missing()


def server_version() -> str:
    """llama-server's own version line, e.g. '0.5.0-dev (build 1, commit 0c1e570)'."""
    done = subprocess.run([str(llamacpp.programs.tool("llama-server")), "--version"], capture_output=True, text=True)
    line = next((ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("version:")), "version: ?")
    return line.removeprefix("version:").strip()


def _healthy(url: str) -> bool:
    return json.loads(http_get(url + "/health", 2.0)).get("status") == "ok"


@contextmanager
def llama_server(model: Path, args: list[str], *, context: int, log: Path) -> Iterator[str]:
    """A running llama-server for `model` (its base URL), stopped on leaving the block whatever happens.

    One killed by SIGILL or SIGSEGV while starting is started again with `--no-repack`: repacking K-quant and Q5_0
    weights into this CPU's interleaved layouts dies so on the AMX machine with the pinned build (Gemma 3 files, the
    real one too; SIGILL mostly, SIGSEGV at times). The weights as stored run other kernels; the served check
    judges their outputs as it judges any: against the target's greedy output, near-ties against llama-server
    without the drafter."""

    def argv(extra: list[str]) -> Callable[[int], list[str]]:
        server = [str(llamacpp.programs.tool("llama-server")), "-m", str(model), *args, *extra, "--host", "127.0.0.1"]
        rest = ["-c", str(context), "-np", "1", "--metrics", "--no-webui", "--seed", "0"]
        return lambda port: [*server, "--port", str(port), *rest]

    with ExitStack() as stack:
        start = partial(running_server, name="llama-server", healthy=_healthy, log=log, timeout_s=START_TIMEOUT_S)
        try:
            url = stack.enter_context(start(argv([])))
        except ServerExited as e:
            if e.returncode not in (-signal.SIGILL, -signal.SIGSEGV):
                raise
            print(
                f"[llamacpp] llama-server was killed by {signal.Signals(-e.returncode).name} while starting ({log}); "
                "started again "
                f"with {NO_REPACK} (the weights as stored, not repacked for this CPU)",
                flush=True,
            )
            url = stack.enter_context(start(argv([NO_REPACK])))
        yield url


def complete(url: str, prompt: list[int], max_new_tokens: int) -> tuple[list[int], dict]:
    """One greedy request, alone: the generated token ids and the server's timings."""
    body = {
        "prompt": prompt,
        "n_predict": max_new_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "cache_prompt": False,  # each request pays its prompt, as our engine's timed decoding does
        "return_tokens": True,
        "stream": False,
    }
    request = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as r:
        answer = json.loads(r.read())
    return list(answer.get("tokens") or []), answer.get("timings") or {}


def counters(url: str) -> tuple[int, int, list[int], int]:
    """llama-server's cumulative spec-decode counters (/metrics): drafts, accepted, per position, draft tokens."""
    text = http_get(url + "/metrics").decode()

    def value(name: str) -> int:
        match = re.search(rf"^llamacpp:{name} (\S+)$", text, re.M)
        return int(float(match.group(1))) if match else 0

    per_pos = {
        int(p): int(float(v))
        for p, v in re.findall(
            r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)$', text, re.M
        )
    }
    accepted_per_pos = [per_pos.get(i, 0) for i in range(max(per_pos, default=-1) + 1)]
    return (
        value("spec_decode_num_drafts_total"),
        value("spec_decode_num_accepted_tokens_total"),
        accepted_per_pos,
        value("spec_decode_num_draft_tokens_total"),
    )


def with_end_token(tokens: list[int], reference: list[int], eos_ids: set[int]) -> list[int]:
    """llama-server stops at an end token without returning it; our reference keeps it: compare like with like."""
    if reference[:-1] == tokens and reference and reference[-1] in eos_ids:
        return tokens + [reference[-1]]
    return tokens


def near_tie(target_model, prompt: list[int], output: list[int], reference: list[int]) -> Optional[float]:
    """The target's top-2 logit gap at the first token where `output` leaves `reference`, if below NEAR_TIE."""
    at = next((i for i, (a, b) in enumerate(zip(output, reference)) if a != b), min(len(output), len(reference)))
    device = next(target_model.parameters()).device
    ids = torch.tensor([prompt + reference[:at]], device=device)
    with torch.no_grad():
        top2 = target_model(ids).logits[0, -1].float().topk(2).values
    gap = float(top2[0] - top2[1])
    return gap if gap < NEAR_TIE else None


def near_ties(target_model, prompts: list, outputs: list, reference: list) -> dict[int, float]:
    """Prompt index → top-2 logit gap, for the differing outputs that left the reference at a near-tie."""
    found = {}
    for i, (prompt, output, ref) in enumerate(zip(prompts, outputs, reference)):
        if output != ref and (gap := near_tie(target_model, prompt, output, ref)) is not None:
            found[i] = gap
    return found


def servable(export: Export):
    """The export's llama.cpp consumer; one line naming the fix where llama.cpp, the family or the GGUF is missing."""
    reason = missing_reason()
    if reason:
        raise EvalError(f"eval.serve={ENGINE}: {reason}")
    family, drafter_dir = export.family, export.path
    if family.not_served(ENGINE):
        raise EvalError(f"{family.not_served(ENGINE)}; set eval.serve=null")
    consumer = family.consumer(ENGINE)
    if consumer.subdir and not (Path(drafter_dir) / consumer.subdir).is_dir():
        raise EvalError(
            f"{drafter_dir} has no {consumer.subdir}/ (llama.cpp's GGUF); re-export it with publish.engines=[{ENGINE}]"
        )
    layout = Path(drafter_dir) / str(consumer.subdir)
    if consumer.subdir and not (layout / llamacpp.STATIC_CACHE_FILE).is_file():  # a static n-gram cache: no model
        _check_gguf(layout / llamacpp.DRAFT_FILE)
    return consumer


def _check_gguf(path: Path) -> None:
    """A GGUF llama-server would refuse after every prompt was decoded (truncated, say), refused before."""
    from gguf import GGUFReader

    try:
        GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, struct.error, IndexError… on a damaged file
        raise EvalError(
            f"{path} is not a readable GGUF ({type(e).__name__}: {str(e)[:80]}); re-export the drafter with "
            f"publish.engines=[{ENGINE}]"
        ) from None


def _serve_logged(target_gguf: Path, args: list[str], prompts: list[list[int]], cfg: EvalConfig, differs):
    """serve_and_decode with the servers' logs in a temporary directory: removed after a run and after Ctrl-C, kept
    only when a server fails (the error names it)."""
    logs = Path(tempfile.mkdtemp(prefix="drafthub-llamacpp-"))
    try:
        out = serve_and_decode(target_gguf, args, prompts, cfg, logs=logs, differs=differs)
    except KeyboardInterrupt:  # a stop the user asked for: the servers are stopped, their logs go too
        shutil.rmtree(logs, ignore_errors=True)
        raise
    shutil.rmtree(logs, ignore_errors=True)
    return out


def served_check(
    target: str,
    export: Export,
    prompts: list[list[int]],
    *,
    reference: list[list[int]],
    ours: dict,
    cfg: EvalConfig,
    eos_ids: set[int],
    dtype: str,
    trust_remote_code: bool = False,
    target_model=None,
) -> dict:
    """The report's `served` section for `export` served by llama-server at γ = cfg.num_speculative_tokens.

    Args:
        target: the target's directory (or a name in the local Hugging Face cache), converted to GGUF once.
        reference: the target's greedy output per prompt (our engine's autoregressive decoding).
        ours: our figures for a chain of γ on the same prompts.
        target_model: the loaded target, to tell a divergence at a near-tie from a real one.
    """
    consumer, gamma = servable(export), cfg.num_speculative_tokens
    spec = consumer.speculative_config(export.path, gamma)
    cut, rule_difference = _draft_cut(spec["args"], cfg, consumer.rule_difference)
    t0 = time.perf_counter()
    target_dir = llamacpp.target.local_dir(target)
    target_gguf = llamacpp.target.target_gguf(target_dir, llamacpp.programs.home() / "targets")

    def differs(output: list[int], i: int) -> bool:
        return with_end_token(output, reference[i], eos_ids) != reference[i]

    outputs, without, (drafts, accepted, per_pos, draft_tokens), speed = _serve_logged(
        target_gguf, spec["args"], prompts, cfg, differs
    )
    quantized = llamacpp.target.served_quantization(target_dir)  # another model than ours: its output is the reference
    engine_same = {i for i, alone in without.items() if quantized and alone == outputs[i]}
    outputs = [with_end_token(o, r, eos_ids) for o, r in zip(outputs, reference)]
    figures = served_figures(drafts, accepted, per_pos, gamma, draft_tokens)
    equal = [o == r for o, r in zip(outputs, reference)]
    ties = {} if target_model is None else near_ties(target_model, prompts, outputs, reference)
    # a near-tie the engine resolves the same way without the drafter: its numerics, not the drafter's doing
    engine_ties = {i for i in ties if with_end_token(without[i], reference[i], eos_ids) == outputs[i]}
    engine_same -= engine_ties
    status, why = verdict(
        ours_section(ours)["tau"],
        figures["tau"],
        sum(equal) + len(engine_ties | engine_same),
        len(prompts),
        cfg.served_tolerance,
        engine="llama.cpp",
        rule_difference=rule_difference,
        drafts=figures["drafts"],
    )
    why += _counted_as_equal(quantized, len(without), engine_same, ties, engine_ties, len(equal) - sum(equal))
    return {
        "engine": ENGINE,
        "engine_version": server_version(),
        "method": spec["method"],
        "server_args": spec["args"],
        "target_gguf": str(target_gguf),  # a GGUF target's own file, or the target converted once
        "target_quantization": quantized,  # its quantized tensor types: outputs then compared with its own
        "num_speculative_tokens": gamma,
        "draft_p_min": cut or 0.0,  # llama-server's --spec-draft-p-min: 0 = always γ
        **figures,
        "draft_tokens": draft_tokens,  # proposed in all: below drafts × γ where a draft was cut
        **(speed or {}),
        "ours": ours_section(ours),
        "equal_prompts": sum(equal),
        "equal_to_engine_alone": len(engine_same),  # a quantized target: equal to llama-server without the drafter
        "num_prompts": len(prompts),
        "near_ties": {str(i): {"gap": gap, "same_without_drafter": i in engine_ties} for i, gap in ties.items()},
        "tolerance": cfg.served_tolerance,
        "verdict": status,
        "reason": why,
        "drafter_dir": str(export.path),
        "files_sha256": served_files_hash(export.path),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _draft_cut(
    args: list[str], cfg: EvalConfig, rule_difference: Optional[str]
) -> tuple[Optional[float], Optional[str]]:
    """llama-server's --spec-draft-p-min set in args: our adaptive length (the same cut, by DSpark's confidence head),
    or the engine's own (eval.llamacpp.draft_p_min, which our chains don't apply: the rule then differs); the cut
    (None: none) and the rule difference to report."""
    cut = cfg.draft_confidence_min if cfg.draft_confidence_min is not None else cfg.llamacpp.draft_p_min or None
    if cut is not None:
        args[args.index("--spec-draft-p-min") + 1] = str(cut)
    if cfg.draft_confidence_min is None and cfg.llamacpp.draft_p_min:
        rule_difference = (
            f"llama-server stops a draft below probability {cfg.llamacpp.draft_p_min:g} (eval.llamacpp.draft_p_min), "
            "ours drafts γ"
        )
    return cut, rule_difference


def _counted_as_equal(quantized: list[str], departed_quantized: int, engine_same, ties, engine_ties, departed) -> str:
    """The reason's account of prompts that left our greedy output yet count as equal: a quantized target's own
    output without the drafter, or a near-tie the engine resolves the same way without it."""
    why = ""
    if quantized:
        why += (
            f"; llama-server serves the target's own GGUF ({'/'.join(quantized)}), whose greedy output left the "
            f"dequantized weights' on {departed_quantized} prompts: {len(engine_same)} of them equal llama-server's "
            "own output without the drafter (counted as equal: the quantized model, not the drafter)"
        )
    if ties:
        gaps = ", ".join(f"{ties[i]:.5f}" for i in sorted(ties))
        why += (
            f"; {departed} left the target's greedy output, {len(ties)} of them at a near-tie (top-2 logits {gaps} "
            f"apart), {len(engine_ties)} exactly as llama.cpp decodes it without the drafter (counted as equal: the "
            "engine's float order, not the drafter)"
        )
    return why


def serve_and_decode(
    target_gguf: Path, args: list[str], prompts: list[list[int]], cfg: EvalConfig, *, logs: Path, differs
) -> tuple[list[list[int]], dict[int, list[int]], tuple[int, int, list[int], int], Optional[dict]]:
    """Greedy outputs per prompt from llama-server started with `args`; for the prompts whose output `differs`
    (output, prompt index → bool) from the target's, the output of llama-server without the drafter; the
    spec-decode counters; and (eval.llamacpp.speed_repeats > 0) the served speed-up against llama-server without
    the drafter. Server logs go to `logs/`."""
    context = max(map(len, prompts)) + cfg.max_new_tokens + 2 * cfg.num_speculative_tokens + 8
    logs.mkdir(parents=True, exist_ok=True)
    repeats, timed = cfg.llamacpp.speed_repeats, _timed(cfg.max_new_tokens)
    with llama_server(target_gguf, args, context=context, log=logs / "with_drafter.log") as spec_url:
        outputs = _decode_all(spec_url, prompts, cfg.max_new_tokens, logs / "with_drafter.log")
        found = counters(spec_url)  # before the timed runs add to them
        differing = [i for i, o in enumerate(outputs) if differs(o, i)]
        if repeats == 0 and not differing:
            return outputs, {}, found, None
        with llama_server(target_gguf, [], context=context, log=logs / "no_drafter.log") as base_url:
            alone = _decode_all(base_url, [prompts[i] for i in differing], cfg.max_new_tokens, logs / "no_drafter.log")
            without = dict(zip(differing, alone))
            if repeats == 0:
                return outputs, without, found, None
            for prompt in prompts[: cfg.warmup_prompts]:  # untimed, as in our engine's eval
                timed(spec_url, prompt), timed(base_url, prompt)
            return outputs, without, found, served_speed(spec_url, base_url, prompts, timed, repeats=repeats, cfg=cfg)


def _decode_all(url: str, prompts: list[list[int]], max_new_tokens: int, log: Path) -> list[list[int]]:
    try:
        return [complete(url, p, max_new_tokens)[0] for p in prompts]
    except (OSError, http.client.HTTPException) as e:
        raise EvalError(f"llama-server failed while decoding ({e!r}); its log: {log}") from None


def _timed(max_new_tokens: int):
    def timed(url: str, prompt: list[int]) -> tuple[int, float]:
        t0 = time.perf_counter()
        tokens, _ = complete(url, prompt, max_new_tokens)
        return len(tokens), time.perf_counter() - t0

    return timed


def unchecked_served_tau(
    target: str | Path, export_dir: Path, spec_type: str, prompts: list[list[int]], *, gamma: int, max_new_tokens: int
) -> float:
    """τ of a drafter directory converted and served by llama.cpp exactly as it is, *without* drafthub's linter:
    what a server makes of an export the linter refuses (tests and benchmarks show the acceptance it prevents).
    Greedy, each prompt alone; τ = 1 + accepted / drafting steps from llama-server's counters."""
    target_dir = llamacpp.target.local_dir(str(target))
    target_gguf = llamacpp.target.target_gguf(target_dir, llamacpp.programs.home() / "targets")
    with tempfile.TemporaryDirectory(prefix="drafthub-unchecked-") as tmp:
        draft = llamacpp.writer.convert(Path(export_dir), Path(tmp) / "draft.gguf", target_dir=target_dir)
        args = ["-md", str(draft), *llamacpp.server_args(spec_type, gamma, lambda settings, g: [], {})]
        context = max(map(len, prompts)) + max_new_tokens + 2 * gamma + 8
        with llama_server(target_gguf, args, context=context, log=Path(tmp) / "server.log") as url:
            _decode_all(url, prompts, max_new_tokens, Path(tmp) / "server.log")
            drafts, accepted, _, _ = counters(url)
    return 1 + accepted / max(drafts, 1)
