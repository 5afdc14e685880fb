"""Shared fixtures: everything is built from the micro toy world (seconds on CPU, no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# pytest-xdist runs the suite in WORKERS processes (pyproject.toml: -n 2): the cores are shared out, and the
# programs the tests start get the same share, since OpenMP and llama.cpp threads spin-wait for a core another
# worker holds (seen: a 2-core run with 2 threads per worker took twice as long as one process).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, (os.cpu_count() or 2) // WORKERS)
torch.set_num_threads(THREADS)
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    os.environ.setdefault("LLAMA_ARG_THREADS", str(THREADS))  # llama-server's -t
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # not every worker's engine on core 0
# The tests' vLLM engines serve a few short prompts: 1 GiB of KV cache each (vLLM's CPU default, 20% of RAM, takes
# seconds to set up per engine). Inherited by the engines, `vllm serve` and the processes the tests launch.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# tests/suite_report.py: time per directory and engine starts, printed after every run;
# tests/vllm_host.py: vLLM engines built in long-lived helper processes (about 2 s an engine instead of 20)
pytest_plugins = ["tests.suite_report", "tests.vllm_host", "tests.engines_absent"]


WHY_CI = {"needs_vllm": "CI installs it and runs these for real", "needs_llamacpp": "CI builds it and runs these"}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Every test that needs vLLM, llama.cpp or a peer trainer is in the slow tier: the edit loop needs none of them
    (tests/engines_absent.py holds it so). vLLM and llama.cpp tests run for real where the engine is installed (CI
    installs vLLM's CPU build and builds llama.cpp with scripts/build_llamacpp.py) and skip, saying why, elsewhere."""
    from eval.serving.llamacpp import missing_reason as llamacpp_missing_reason
    from eval.serving.vllm import missing_reason as vllm_missing_reason

    reasons = {"needs_vllm": vllm_missing_reason(), "needs_llamacpp": llamacpp_missing_reason()}
    for item in items:
        if any(item.get_closest_marker(m) for m in ("needs_vllm", "needs_llamacpp", "needs_peers")):
            item.add_marker(pytest.mark.slow)
        for marker, reason in reasons.items():
            if reason is not None and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=f"{reason} — {WHY_CI[marker]}"))


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """Use the caller's $DRAFTHUB_CACHE if set (fast reruns), else a per-session temporary one. llama.cpp's build
    (scripts/build_llamacpp.py, minutes) stays where the caller's cache has it."""
    from heads.formats import llamacpp

    if "DRAFTHUB_CACHE" not in os.environ:
        os.environ.setdefault("DRAFTHUB_LLAMACPP", str(llamacpp.programs.home()))
        os.environ["DRAFTHUB_CACHE"] = str(tmp_path_factory.mktemp("drafthub-cache"))
    yield


@pytest.fixture(scope="session", autouse=True)
def _gguf_conversions_kept(_cache_dir):
    """llama.cpp's converter runs once per content (tests/gguf_cache.py): seconds a conversion, dozens in a run."""
    from heads.formats import llamacpp
    from tests import gguf_cache

    real = llamacpp.programs.run_converter
    gguf_cache.install()
    yield
    llamacpp.programs.run_converter = real


@pytest.fixture(scope="session", autouse=True)
def _micro_world_only():
    """Tests use the micro world alone: a test that reached the main job's toy world (or the chat world) would
    build it, 5 to 20 minutes of a CI run, or pass only on a machine whose cache already holds it."""
    from distill.toyworld import build

    find_or_build = build._find_or_build

    def micro_only(size: str):
        if size != "micro":
            raise AssertionError(f"a test reached the toy world {size!r}; tests use toyworld:micro (target=micro)")
        return find_or_build(size)

    build._find_or_build = micro_only
    yield
    build._find_or_build = find_or_build


@pytest.fixture(scope="session")
def micro_world(_cache_dir):
    from distill.toyworld import load_world

    return load_world("micro")


@pytest.fixture(scope="session")
def tokenizer(micro_world):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(micro_world.target_dir)


@pytest.fixture(scope="session")
def target(micro_world):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(micro_world.target_dir).eval()


@pytest.fixture(scope="session")
def prompt_ids(micro_world, tokenizer):
    """A few held-out chat prompts as token ids."""
    from distill.prompts.chat import encode_prompt, prompt_messages
    from distill.prompts.read import load_conversations

    convs = load_conversations(str(micro_world.prompts_file("heldout")), "train")
    return [encode_prompt(tokenizer, prompt_messages(c))[-60:] for c in convs[:6]]


@pytest.fixture(scope="session")
def weak_draft(target, micro_world):
    """A small random-ish draft LM: it agrees with the target sometimes, so steps both accept and reject."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=target.config.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    draft = LlamaForCausalLM(cfg).eval()
    # Share the target's embeddings (projected) so its guesses are correlated with the target's.
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight[:, :32])
    return draft


REPO = Path(__file__).resolve().parents[1]


def import_script(name: str):
    """A module of scripts/ (not a package: imported with that folder on the path for the import alone)."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "scripts"))


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """build_standin by name, each built once per session: `standin("qwen3").path` (tests/standins.py)."""
    from tests.standins import build_standin

    root = tmp_path_factory.mktemp("standins")
    built = {}

    def get(name: str):
        if name not in built:
            built[name] = build_standin(name, root)
        return built[name]

    return get
