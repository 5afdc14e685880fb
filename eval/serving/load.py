"""Serving under load: the speed-up a drafter keeps as concurrent requests pile up, on vLLM's OpenAI server.

The target is started twice with `vllm serve`'s server on loopback ports chosen free — with the export's speculative
config (exactly the card's) and without — and vLLM's own load generator (`vllm bench serve`, called in process)
drives each at every concurrency of eval.serve_load with the held-out prompts: closed loop, c requests in flight,
eval.max_new_tokens each, sampling as eval.temperature says. Levels and sides are interleaved and repeated
(eval.vllm.load_repeats), the side that goes first alternating, so that drift on the machine hits both.

Per level: output tokens/s, time per output token (median, p90), time to first token, served τ and per-position
acceptance (the server's spec-decode counters, which the load generator reads from /metrics), the speed-up in
throughput and in TPOT with bootstrap intervals over requests, and how many requests each server ran at once (its
own gauge, eval/serving/concurrency.py). The break-even concurrency is the highest level up to which every measured
level speeds up both, among the levels the servers ran at once (eval/serving/load_figures.py).

eval.serve_url + eval.baseline_url measure servers already deployed instead: the same protocol, nothing started.
The server module is started as `python -m vllm.entrypoints.openai.api_server` — what `vllm serve` runs — because the
`vllm` command of vLLM's CPU wheel fails before parsing its arguments (it looks up a package named vllm, which that
wheel is not).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.serving import vllm
from eval.serving.concurrency import PeakRunning
from eval.serving.load_figures import break_even, level_figures
from eval.serving.process import http_get, running_servers
from heads.families import Export


def server_argv(
    target: str, speculative_config: Optional[dict], cfg: EvalConfig, *, max_model_len: int, dtype: str, trust: bool
) -> Callable[[int], list[str]]:
    """`vllm serve TARGET …` on a port: the target with the drafter (speculative_config) or alone (None)."""
    memory, eager = vllm.engine_defaults(cfg.vllm, engines=2)

    def argv(port: int) -> list[str]:
        out = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", target]
        out += ["--host", "127.0.0.1", "--port", str(port), "--seed", "0", "--dtype", dtype]
        out += ["--max-model-len", str(max_model_len), "--gpu-memory-utilization", str(memory)]
        out += ["--tensor-parallel-size", str(cfg.vllm.tensor_parallel_size)]
        # vLLM admits max_num_seqs requests at once (128 or 256 by default) and queues the rest: a higher level would
        # measure its queue, so the engine is sized for the highest level measured
        out += ["--max-num-seqs", str(max(cfg.serve_load, default=1))]
        out += ["--enforce-eager"] if eager else []
        out += ["--trust-remote-code"] if trust else []
        return out + (["--speculative-config", json.dumps(speculative_config)] if speculative_config else [])

    return argv


def _start(stack: ExitStack, servers: list[dict]) -> list[str]:
    """The servers' URLs, each stopped when `stack` closes. On a GPU one after another: vLLM sizes its KV cache from
    the memory free while it starts, which a neighbour starting beside it would skew. On a CPU together (each takes
    its share of RAM as set): their start-ups overlap."""
    import torch

    groups = [[s] for s in servers] if torch.cuda.is_available() else [servers]
    urls = []
    for group in groups:
        print(f"[load] starting {' and '.join(s['name'] for s in group)}", flush=True)
        urls += stack.enter_context(running_servers(group))
    return urls


def _healthy(url: str) -> bool:
    http_get(url + "/health", 2.0)  # 200, else an HTTPError (an OSError): not yet
    return True


def server_version(url: str) -> str:
    """The version a deployed vLLM server reports (GET /version), or 'unknown' where it does not say."""
    try:
        return str(json.loads(http_get(url + "/version", 5.0)).get("version", "unknown"))
    except (OSError, ValueError):
        return "unknown"


def bench_args(url: str, tokenizer: str, prompts_file: Path, concurrency: int, cfg: EvalConfig, trust: bool):
    """`vllm bench serve`'s arguments for one level against one server (the model is the one the server serves)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    requests = cfg.vllm.load_requests or max(cfg.num_prompts, 4 * concurrency)
    argv = ["--base-url", url, "--tokenizer", tokenizer]
    argv += ["--dataset-name", "custom", "--dataset-path", str(prompts_file)]
    argv += ["--skip-chat-template", "--disable-shuffle", "--custom-output-len", str(cfg.max_new_tokens)]
    argv += ["--num-prompts", str(requests), "--max-concurrency", str(concurrency), "--request-rate", "inf"]
    argv += ["--num-warmups", "1", "--seed", str(cfg.seed), "--temperature", str(cfg.temperature)]
    argv += ["--top-p", str(cfg.top_p)] + (["--top-k", str(cfg.top_k)] if cfg.top_k else [])
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90", "--save-detailed"]
    argv += ["--disable-tqdm"] + (["--trust-remote-code"] if trust else [])
    return parser.parse_args(argv)


def drive(args) -> dict:
    """One `vllm bench serve` run (its printed table kept out of our output); its result with per-request lists."""
    from vllm.benchmarks.serve import main

    with contextlib.redirect_stdout(io.StringIO()):
        result = main(args)
    gc.unfreeze()  # the load generator freezes the heap for its run; ours goes on afterwards
    if result["failed"]:
        errors = [e for e in result.get("errors", []) if e]
        raise EvalError(
            f"{result['failed']} of {result['failed'] + result['completed']} requests to {args.base_url} failed "
            f"(first: {errors[0][:200] if errors else '?'}); check the server's log"
        )
    return result


def prompt_texts(tokenizer, prompts: list[list[int]]) -> list[str]:
    """The held-out prompts as the text a client sends: templated already, so the load generator adds no template.

    A tokenizer that puts its BOS in front of every text by itself (Llama 3) would otherwise see it twice: the
    templated ids' own BOS is left out of the text, the server adds it back."""
    bos = tokenizer.bos_token_id
    adds_bos = bos is not None and tokenizer("x").input_ids[:1] == [bos]
    return [tokenizer.decode(p[1:] if adds_bos and p[:1] == [bos] else p) for p in prompts]


def sweep(
    spec_url: str,
    base_url: str,
    tokenizer_name: str,
    texts: list[str],
    cfg: EvalConfig,
    trust: bool,
    limit: Optional[int] = None,
) -> dict:
    """Every level of eval.serve_load on both servers, interleaved and repeated; the per-level figures (limit: the
    servers' max_num_seqs where drafthub started them; None: deployed servers, read from their gauges)."""
    runs = {c: {"speculative": [], "no_speculation": []} for c in cfg.serve_load}
    with tempfile.TemporaryDirectory(prefix="drafthub-load-") as tmp:
        prompts_file = Path(tmp) / "prompts.jsonl"
        prompts_file.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
        for r in range(cfg.vllm.load_repeats):
            for i, c in enumerate(cfg.serve_load):
                sides = [("speculative", spec_url), ("no_speculation", base_url)]
                for side, url in sides if (r + i) % 2 == 0 else sides[::-1]:
                    print(f"[load] repeat {r + 1}/{cfg.vllm.load_repeats}, concurrency {c}, {side}", flush=True)
                    with PeakRunning(url) as watch:  # what the server ran at once: above its limit a level queues
                        result = drive(bench_args(url, tokenizer_name, prompts_file, c, cfg, trust))
                    runs[c][side].append({**result, "peak_running": watch.peak})
    levels = [level_figures(c, runs[c]["speculative"], runs[c]["no_speculation"], limit) for c in cfg.serve_load]
    return {"levels": levels, "break_even": break_even(levels)}


def check_servers_answer(cfg: EvalConfig) -> None:
    """eval.serve_url and eval.baseline_url answer /health, before any prompt is decoded (the sweep runs last)."""
    for key, url in (("eval.serve_url", cfg.serve_url), ("eval.baseline_url", cfg.baseline_url)):
        if url is None:
            continue
        try:
            http_get(url.rstrip("/") + "/health", 10.0)
        except OSError as e:
            raise EvalError(
                f"{key}={url}: no server answers at {url.rstrip('/')}/health ({getattr(e, 'reason', e)}); start it "
                "or fix the URL"
            ) from None


def load_check(
    target: str,
    export: Export,
    prompts: list[list[int]],
    cfg: EvalConfig,
    *,
    dtype: str,
    trust_remote_code: bool = False,
    log_dir: Optional[Path] = None,
) -> dict:
    """The report's `serving_load` section: the export served by `vllm serve` (or cfg.serve_url) under load."""
    from transformers import AutoTokenizer

    if reason := vllm.missing_reason():
        raise EvalError(f"eval.serve_load: {reason}")
    import vllm as vllm_module

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
    texts = prompt_texts(tokenizer, prompts)
    gamma, external = cfg.num_speculative_tokens, cfg.serve_url is not None
    speculative_config = None
    with ExitStack() as stack:
        if external:
            spec_url, base_url = cfg.serve_url.rstrip("/"), cfg.baseline_url.rstrip("/")
        else:
            family = export.family
            if family.not_served(vllm.ENGINE):
                raise EvalError(f"eval.serve_load: {family.not_served(vllm.ENGINE)}; set eval.serve_load=[]")
            consumer = family.consumer(vllm.ENGINE)
            speculative_config = consumer.speculative_config(export.path, gamma)
            logs = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="drafthub-serve-")))
            logs.mkdir(parents=True, exist_ok=True)
            room = max(map(len, prompts)) + cfg.max_new_tokens + 2 * gamma + 1
            stack.enter_context(consumer.patch(export.path))  # the family's workaround for a vLLM bug, if any
            servers = [
                {
                    "argv": server_argv(target, spec, cfg, max_model_len=room, dtype=dtype, trust=trust_remote_code),
                    "name": f"vllm serve ({side})",
                    "healthy": _healthy,
                    "log": logs / f"vllm_serve_{side}.log",
                    "timeout_s": cfg.vllm.start_timeout_s,
                }
                for side, spec in (("speculative", speculative_config), ("no_speculation", None))
            ]
            spec_url, base_url = _start(stack, servers)
        limit = None if external else max(cfg.serve_load)  # the --max-num-seqs server_argv gave both servers
        figures = sweep(spec_url, base_url, target, texts, cfg, trust_remote_code, limit)
    return {
        "engine": "vllm",
        "engine_version": server_version(spec_url) if external else vllm_module.__version__,
        "load_generator": f"vllm bench serve {vllm_module.__version__}",
        "server": "external" if external else "vllm serve (started by drafthub)",
        "speculative_config": speculative_config,
        "num_speculative_tokens": gamma,
        "concurrency": list(cfg.serve_load),
        "repeats": cfg.vllm.load_repeats,
        "max_new_tokens": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "prompts": len(prompts),
        **figures,
        "seconds": round(time.perf_counter() - t0, 1),
    }
