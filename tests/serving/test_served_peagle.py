"""The served check for P-EAGLE: vLLM serves the speculators "peagle" export with parallel drafting
(eagle3 + parallel_drafting, one drafter forward per step), and its counters must agree with ours."""

import pytest

from heads.formats.fingerprint import served_files_hash
from tests.exporting import VERIFIER, export
from tests.serving.test_served_check import _serve


@pytest.mark.needs_vllm
def test_vllm_serves_the_peagle_export_as_our_engine_runs_it(
    tmp_path_factory, target, tokenizer, micro_world, prompt_ids
):
    from tests.eval.peagle_fit import fit_peagle

    drafter_dir = export(
        fit_peagle(target), tmp_path_factory.mktemp("exports") / "peagle", verifier=VERIFIER, num_speculative_tokens=3
    )
    report = _serve(target, tokenizer, micro_world, drafter_dir, prompt_ids)
    served = report["served"]
    assert served["method"] == "eagle3"
    assert served["equal_prompts"] == len(prompt_ids)  # vLLM's speculative output == the target's greedy output
    assert served["verdict"] == "ok", served["reason"]
    ours = 1 + sum(report["per_position_acceptance"])  # τ as vLLM counts it
    assert served["ours"]["tau"] == pytest.approx(ours) and 1.0 < served["tau"]
    assert abs(served["tau"] - ours) <= 0.05 * ours, (served["tau"], ours)
    assert served["files_sha256"] == served_files_hash(drafter_dir)
    print(f"served τ {served['tau']:.3f}, ours {ours:.3f}")
