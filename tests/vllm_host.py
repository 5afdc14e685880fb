"""vLLM engines for the tests, each built inside a long-lived helper process instead of in two new ones, and kept
for the next test that asks for the same engine.

On a CPU, `vllm.LLM(...)` spawns an engine-core process and a worker process, and each imports vLLM, torch and
transformers afresh: about 20 s an engine on 2 cores, before and after the second it takes to serve the tests'
few prompts. Here `vllm.LLM` becomes `HostedLLM`: the same engine, built with vLLM's in-process engine core
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as vLLM's own tests run it) inside a helper process that has vLLM imported
already: about 2 s an engine. Everything drafthub does with an engine is forwarded (`generate`, `get_metrics`,
`llm_engine.engine_core.shutdown()`), so the code under test is the code users run; only where the engine's
processes live differs. vLLM's own processes still serve in the suite: `vllm serve` under load
(tests/serving/test_pipeline_serve.py), the served check of a launched ZeRO-3 job (tests/test_real_recipes.py) and
the hidden-states extraction (the `vllm_own_processes` fixture, tests/serving/test_vllm_features.py).

Engines start once per setting: a shut-down engine stays in its helper, and a later start with the same arguments,
environment and files (the model directories' contents, not only their paths) gets it back, as served checks do
on one server. Not for drafters that learn from earlier requests (vLLM's suffix decoding), whose next check would
see the previous one's history. drafthub's checks count an engine's spec-decode counters from their own first
request (eval/serving/vllm.py), so a reused engine reports what a new one would.

One engine per helper: vLLM keeps process-wide state per engine (its distributed group, a frozen GC heap, cached
environment). A helper retires after an engine that imported numba (vLLM's n-gram drafter): vLLM's kernel-override
scan of every loaded module breaks on llvmlite's library object, so the next engine gets a fresh helper. A warm
spare (vLLM imported while the tests go on) is always kept. The caller's DRAFTHUB_* and VLLM_* variables travel
with each engine start, as a spawned engine process would inherit them.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.suite_report import record_start

ENV_PREFIXES = ("DRAFTHUB_", "VLLM_")
IN_PROCESS = "VLLM_ENABLE_V1_MULTIPROCESSING"
STATEFUL_METHODS = {"suffix"}  # drafters that learn from the requests an engine served: never handed on
KEEP_IDLE = 3  # helpers kept between tests (each holds vLLM, ~0.6 GB, and its engine with 1 GiB of KV cache)


def _helper_main(conn, log: str) -> None:
    """The helper's loop: one engine at a time, built and driven on request."""
    log_file = open(log, "a", buffering=1)
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    os.environ[IN_PROCESS] = "0"
    llm = None
    while True:
        try:
            op, args, kwargs = conn.recv()
        except EOFError:
            return
        result = None
        try:
            if op == "warm":  # imported while the tests go on, so the next engine starts at once
                import vllm  # noqa: F401
            elif op == "start":
                _set_env(args[0])
                from vllm import LLM

                llm = LLM(*args[1:], **kwargs)
            elif op == "shutdown":
                llm.llm_engine.engine_core.shutdown()
                llm, result = None, "llvmlite" in sys.modules  # True: this helper retires
                import gc

                gc.collect()
            else:
                result = getattr(llm, op)(*args, **kwargs)
            conn.send(("ok", result))
        except BaseException as e:  # noqa: B036 — everything goes back to the caller, who raises it
            try:
                conn.send(("error", e))
            except Exception:
                conn.send(("error", RuntimeError("".join(traceback.format_exception(e))[-3000:])))
        if op == "shutdown" and result is True:
            return


def _set_env(env: dict) -> None:
    """The caller's DRAFTHUB_* / VLLM_* variables, as an engine process it spawned would inherit them."""
    for name in [n for n in os.environ if n.startswith(ENV_PREFIXES) and n != IN_PROCESS]:
        if name not in env:
            del os.environ[name]
    os.environ.update({k: v for k, v in env.items() if k != IN_PROCESS})


class _Helper:
    """A helper process; `key` names the engine it holds, if any."""

    def __init__(self, log: Path):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_helper_main, args=(child, str(log)), daemon=True, name="vllm-test-helper")
        self.process.start()
        child.close()
        self.log, self.pending, self.key = log, 0, None
        record_start("helper spawned (vLLM imported once)", str(log))
        self._send("warm")

    def _send(self, op: str, *args, **kwargs) -> None:
        self.conn.send((op, args, kwargs))
        self.pending += 1

    def call(self, op: str, *args, **kwargs):
        try:
            while self.pending:
                self._receive()  # a reply owed from before (the warm-up's)
            self._send(op, *args, **kwargs)
            status, result = self._receive()
        except (EOFError, OSError):
            tail = " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])
            raise RuntimeError(f"the vLLM test helper died ({self.process.exitcode}): {tail}") from None
        if status == "error":
            raise result
        return result

    def _receive(self):
        reply = self.conn.recv()
        self.pending -= 1
        return reply

    def release_engine(self) -> bool:
        """Shut the engine down; True when the helper is still fit for another."""
        self.key = None
        return not self.call("shutdown")

    def stop(self) -> None:
        self.conn.close()
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()


class HelperPool:
    """Idle helpers, each empty or holding the engine it last served; a busy helper holds exactly one engine."""

    def __init__(self, log_dir: Path):
        self.log_dir, self.idle = log_dir, []  # least recently used first

    def take(self, key) -> _Helper:
        """The helper holding engine `key` if one does; else an empty one; else the least recently used, its engine
        shut down; else a new one. A warm spare is started whenever none is left idle (it imports vLLM while the
        test goes on), so the next engine, or a second one alive beside this (the served speed-up's), never waits
        for vLLM's import."""
        self.idle = [h for h in self.idle if h.process.is_alive()]
        helper = next((h for h in self.idle if key is not None and h.key == key), None)
        helper = helper or next((h for h in self.idle if h.key is None), None) or (self.idle or [None])[0]
        if helper is None:
            helper = self._new()
        else:
            self.idle.remove(helper)
            if helper.key is not None and helper.key != key and not helper.release_engine():
                helper.stop()  # retired (see the module docstring)
                helper = self._new()
        if not self.idle:
            self.idle.append(self._new())
        return helper

    def _new(self) -> _Helper:
        return _Helper(Path(tempfile.mkstemp(prefix="vllm-helper-", suffix=".log", dir=self.log_dir)[1]))

    def give_back(self, helper: _Helper) -> None:
        """Keep the helper, with its engine if it has a key; past KEEP_IDLE the least recently used goes."""
        if helper.key is None and not helper.release_engine():
            helper.stop()
            return
        self.idle.append(helper)
        while len(self.idle) > KEEP_IDLE:
            self.idle.pop(0).stop()

    def close(self) -> None:
        for helper in self.idle:
            helper.stop()
        self.idle = []


def _files_digest(path) -> str | None:
    """What a directory argument holds (file names, sizes, modification times), or None for anything else."""
    try:
        root = Path(path)
        if not root.is_dir():
            return None
    except (TypeError, OSError):
        return None
    stats = sorted((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in root.rglob("*"))
    return hashlib.sha256(repr(stats).encode()).hexdigest()


def engine_key(args: tuple, kwargs: dict, env: dict) -> str | None:
    """Everything that makes two engines the same engine, or None for one that must never be handed on."""
    spec = kwargs.get("speculative_config") or {}
    if spec.get("method") in STATEFUL_METHODS:
        return None
    dirs = [kwargs.get("model"), *args[:1], spec.get("model")]
    fields = {"args": args, "kwargs": kwargs, "env": env, "files": [_files_digest(d) for d in dirs]}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=repr).encode()).hexdigest()


POOL: HelperPool | None = None
REAL_LLM = None  # vllm.LLM as vLLM ships it, for the tests that need vLLM's own processes (`vllm_own_processes`)


class HostedLLM:
    """`vllm.LLM` for the tests: the engine lives in a helper process (module docstring)."""

    def __init__(self, *args, **kwargs):
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) and k != IN_PROCESS}
        key = engine_key(args, kwargs, env)
        self._helper = POOL.take(key)
        if key is not None and self._helper.key == key:
            record_start("engine handed on to a later test with the same settings", key)
        else:
            try:
                self._helper.call("start", env, *args, **kwargs)
            except BaseException:
                self._helper.stop()  # a failed start may leave vLLM's process-wide state half set
                raise
            record_start("vLLM engine (in a test helper)", {k: str(v) for k, v in kwargs.items()})
        self._key = key
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=self._shutdown))

    def generate(self, *args, **kwargs):
        return self._helper.call("generate", *args, **kwargs)

    def get_metrics(self):
        return self._helper.call("get_metrics")

    def _shutdown(self) -> None:
        if self._helper is None:
            return
        helper, self._helper = self._helper, None
        helper.key = self._key  # kept running for a later start with the same key (None: shut down)
        POOL.give_back(helper)


@pytest.hookimpl(tryfirst=True)  # before tests/suite_report.py wraps what is left of vllm.LLM
def pytest_collection_finish(session) -> None:
    """vllm.LLM → HostedLLM for this run, where vLLM is installed and a selected test uses it."""
    global POOL, REAL_LLM
    import importlib.util

    if importlib.util.find_spec("vllm") is None or not any(i.get_closest_marker("needs_vllm") for i in session.items):
        return
    import vllm

    POOL = HelperPool(Path(session.config._tmp_path_factory.getbasetemp()))
    REAL_LLM, vllm.LLM = vllm.LLM, HostedLLM


def pytest_sessionfinish(session) -> None:
    if POOL is not None:
        POOL.close()


@pytest.fixture
def vllm_own_processes(monkeypatch):
    """vLLM's own engine processes for this test, for what an in-process engine core cannot do (see the test)."""
    import vllm

    monkeypatch.setattr(vllm, "LLM", REAL_LLM)
