"""Acceptance regression: a small draft LM, distilled, trained and measured on the micro world through the real
`python -m train`, must keep its acceptance. A change anywhere on the path (the chat template, distillation, the
KD loss, the loop, the speculative engine, the verifier) that moves τ beyond the tolerance fails here, whether it
breaks acceptance or quietly improves it — a moved reference is then re-recorded with the reason in the commit.

Reference recorded on the CI machine (2 CPU cores, torch 2.13.0): the figures are deterministic for a seed on one
machine; the tolerance covers float differences between CPUs and BLAS builds.
"""

from __future__ import annotations

import json

from tests.cli_runs import run_app

RECIPE = [
    "recipe=toy",
    "target=micro",
    "data.max_prompts=64",
    "data.sampling.max_new_tokens=32",
    "trainer.max_steps=120",
    "trainer.batch_size=8",
    "trainer.seed=0",
    "eval.num_prompts=24",
    "eval.warmup_prompts=0",
    "eval.max_new_tokens=32",
    "eval.num_speculative_tokens=4",
    "eval.gamma_sweep=[]",
    "stages=[distill,train,eval]",
]
TAU = 2.5050  # τ at γ = 4 (mean tokens per target forward), recorded with RECIPE
ALPHA = 0.4147  # per-token acceptance
TOLERANCE = 0.05  # relative: ±5 % of the reference


def test_small_draft_lm_keeps_its_acceptance(tmp_path, micro_world):
    code, out, err = run_app("train", [*RECIPE, f"run_dir={tmp_path}/run"])
    assert code == 0, err[-2000:]
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True
    print(f"acceptance regression: tau {report['tau']:.4f} alpha {report['alpha']:.4f}")
    assert abs(report["tau"] - TAU) <= TOLERANCE * TAU, (report["tau"], TAU)
    assert abs(report["alpha"] - ALPHA) <= TOLERANCE * ALPHA, (report["alpha"], ALPHA)
