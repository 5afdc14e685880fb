"""The publish gate, the local registry, the Hub upload (with a recording stand-in for HfApi) and the script."""

import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from distill.targets.load import eos_token_ids
from eval.claims import DIGEST, figures_digest, samples_digest
from heads.draft_lm import DraftLM
from heads.families import read_export, write_provenance
from heads.formats.fingerprint import served_files_hash
from tests.cli_runs import run_app, run_push
from tests.train.publishing import SERVED, consistent_report, published_drafter, tiny_export
from train.registry.gate import PublishError, check_publishable, push_to_hub
from train.registry.local_hub import list_drafters, publish_local, read_index

SECRET = "hf_drafthubTestSecretNeverWritten"


def _edit(d, rebind=False, **changes):
    """Edit eval figures in drafthub.json by hand; rebind=True also recomputes their digest (a forger's move)."""
    prov = json.loads((d / "drafthub.json").read_text())
    figures = {**prov["eval"], **changes}
    if rebind:
        figures[DIGEST] = figures_digest(figures)
    (d / "drafthub.json").write_text(json.dumps({**prov, "eval": figures}))
    return d


def _refusals(tmp_path, target, tokenizer):
    """(case, drafter directory, expected message) for every way a drafter must be refused."""
    cases = []
    d = published_drafter(tmp_path / "stale", target, tokenizer)
    (d / "config.json").write_text(
        (d / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05')
    )
    cases.append(("stale", d, "stale eval report"))
    d = published_drafter(tmp_path / "no-eval", target, tokenizer)
    prov = json.loads((d / "drafthub.json").read_text())
    (d / "drafthub.json").write_text(json.dumps({**prov, "eval": None}))
    cases.append(
        (
            "missing report",
            d,
            "run the pipeline's eval stage, or python -m eval drafter_dir=",
        )
    )
    cases.append(("not lossless", published_drafter(tmp_path / "lossy", target, tokenizer, equal=3), "not lossless"))
    cases.append(
        ("below min_tau", published_drafter(tmp_path / "weak", target, tokenizer, min_tau=3.0), "below min_tau=3.0")
    )
    served = {**SERVED, "tau": 1.2, "verdict": "broken", "reason": "served τ 1.2 vs ours 2.5"}
    cases.append(
        (
            "served check failed",
            published_drafter(tmp_path / "served", target, tokenizer, served=served),
            "the served check failed (served τ 1.2 vs ours 2.5)",
        )
    )
    d = published_drafter(tmp_path / "format", target, tokenizer)
    (d / "model.safetensors").write_bytes(b"not a safetensors file")
    prov = json.loads((d / "drafthub.json").read_text())
    _edit(d, rebind=True, export_sha256=served_files_hash(d))  # hashed after the damage: only the format check can
    cases.append(("format check", d, "does not pass its format checks"))
    d = published_drafter(tmp_path / "profile", target, tokenizer)
    (d / "speculation_profile.json").write_text(json.dumps({"schema_version": "1.0", "mean_accept_length": 6.5}))
    cases.append(("edited profile", d, "speculation_profile.json is not the acceptance profile of its eval report"))
    # Forged figures: edited by hand (the digest breaks), or edited with the digest recomputed (the figures
    # contradict each other), or the samples behind the lossless claim edited.
    not_measured = "its eval figures are not the ones eval measured"
    cases.append(("edited τ", _edit(published_drafter(tmp_path / "f1", target, tokenizer), tau=9.9), not_measured))
    cases.append(
        ("edited speed-up", _edit(published_drafter(tmp_path / "f2", target, tokenizer), speedup=5.0), not_measured)
    )
    lossy = published_drafter(tmp_path / "f3", target, tokenizer, equal=3)
    cases.append(("edited lossless flag", _edit(lossy, lossless=True, lossless_prompts=4), not_measured))
    broken = published_drafter(
        tmp_path / "f4", target, tokenizer, served={**SERVED, "verdict": "broken", "reason": "x"}
    )
    cases.append(("edited served verdict", _edit(broken, served=SERVED), not_measured))
    d = _edit(published_drafter(tmp_path / "f5", target, tokenizer), rebind=True, tau=9.9)
    cases.append(("impossible τ, digest recomputed", d, "τ 9.900 exceeds γ + 1 = 5"))
    d = _edit(published_drafter(tmp_path / "f6", target, tokenizer), rebind=True, tau=3.0)
    cases.append(("τ beyond its accepted drafts", d, "τ 3.000 is outside [2.300, 2.500]"))
    d = _edit(published_drafter(tmp_path / "f7", target, tokenizer), rebind=True, alpha=0.9)
    cases.append(("α not accepted ÷ proposed", d, "α 0.9000 is not accepted ÷ proposed = 0.3750"))
    d = _edit(published_drafter(tmp_path / "f8", target, tokenizer), rebind=True, speedup=5.0)
    cases.append(("speed-up not the throughput ratio", d, "speed-up 5.000× is not speculative ÷ autoregressive"))
    d = published_drafter(tmp_path / "f9", target, tokenizer)
    (d / "eval_samples.jsonl").write_text((d / "eval_samples.jsonl").read_text().replace("true", "false", 1))
    cases.append(("edited samples", d, "is not the samples file eval wrote with this report"))
    d = published_drafter(tmp_path / "f10", target, tokenizer)
    samples = (d / "eval_samples.jsonl").read_text().replace("true", "false", 1)
    (d / "eval_samples.jsonl").write_text(samples)
    _edit(d, rebind=True, samples_sha256=samples_digest(samples))
    cases.append(("samples contradict lossless, digests recomputed", d, "holds 4 prompts, 3 equal; the report claims"))
    return cases


def test_gate_refuses_every_failing_case_and_the_registry_stays_untouched(tmp_path, target, tokenizer):
    hub = tmp_path / "hub"
    for case, d, message in _refusals(tmp_path, target, tokenizer):
        with pytest.raises(PublishError, match=re.escape(message)) as refused:
            check_publishable(d)
        if case == "missing report":  # what the message tells the user to run is what records a report
            assert "record=true (without record=true the report stays in out_dir)" in str(refused.value)
        with pytest.raises(PublishError, match=re.escape(message)):
            publish_local(d, hub)
        assert not hub.exists() or not any(hub.iterdir()), case  # nothing half-written
    with pytest.raises(PublishError, match="no drafthub.json"):
        check_publishable(tmp_path)


def test_a_drafter_slower_than_plain_decoding_is_published_with_a_warning(tmp_path, target, tokenizer, capsys):
    d = published_drafter(tmp_path / "slow", target, tokenizer, speedup=0.79)
    check_publishable(d)  # publishable: lossless and above the τ bar; the speed-up is a fact about one device
    expected = "Measured speed-up 0.79× on CPU test, 2 threads: speculative decoding with this drafter was slower"
    assert expected in capsys.readouterr().err
    card = (d / "README.md").read_text()
    assert f"> ⚠️ {expected}" in card
    assert "| 0.79× (0.71–0.87×) |" in card and "Timed on CPU test, 2 threads." in card
    fast = published_drafter(tmp_path / "fast", target, tokenizer)
    check_publishable(fast)
    assert "warning" not in capsys.readouterr().err and "⚠️" not in (fast / "README.md").read_text()


def test_local_hub_round_trips_versions_and_lists_best_first(tmp_path, target, tokenizer):
    a = published_drafter(tmp_path / "a", target, tokenizer)
    b = published_drafter(
        tmp_path / "b",
        target,
        tokenizer,
        model_name="better",
        tau=3.1,
        served={**SERVED, "tau": 3.05},
    )
    hub = tmp_path / "hub"
    a2 = published_drafter(tmp_path / "a2", target, tokenizer, tau=2.25)  # the same model, measured again
    # (figures made up: unverifiable, so not re-measured)
    first, second, third = (publish_local(x, hub, verify_prompts=0) for x in (a, a2, b))
    assert (first["version"], second["version"], third["version"]) == (1, 2, 1)
    assert publish_local(a, hub, verify_prompts=0) == first  # the same files and figures: one version, no copy
    assert served_files_hash(hub / first["path"]) == served_files_hash(a)  # the files as evaluated
    loaded = DraftLM.from_pretrained(hub / second["path"])  # and loadable from the registry
    assert loaded.model.config.hidden_size == 32
    assert [(d["model_name"], d["version"]) for d in list_drafters(hub, "toyworld:micro")] == [
        ("better", 1),
        ("toy-draft", 1),
        ("toy-draft", 2),
    ]
    assert len(read_index(hub)) == 3 and third["served"] == {
        "engine": "vllm",
        "version": "0.32.0",
        "tau": 3.05,
        "ours_tau": 2.5,  # drafthub's own, counted as vLLM counts: what the served τ stands beside
        "verdict": "ok",
        "speedup": None,  # that served check measured acceptance only
        "speedup_spread": None,
    }
    assert "toyworld:micro" in (hub / "index.html").read_text()  # the site's front page (tests/train/test_hub_site.py)
    page = (hub / "site" / "toyworld--micro" / "index.html").read_text()  # the target's leaderboard
    assert page.index("better v1") < page.index("toy-draft v1")
    assert ">1.30× (1.17–1.43×) on CPU test, 2 threads</td>" in page  # never a speed-up without spread, device
    assert not list(hub.rglob(".v*"))  # no staging debris
    with pytest.raises(PublishError, match="no drafter for target 'other'"):
        list_drafters(hub, "other")


class _RecordingHub:
    """Stands in for huggingface_hub.HfApi: records the calls, keeps branches per repo."""

    def __init__(self):
        self.calls, self.branches = [], {"main"}

    def create_repo(self, repo_id, private, exist_ok):
        self.calls.append(("create_repo", repo_id, private))

    def list_repo_refs(self, repo_id):
        return SimpleNamespace(branches=[SimpleNamespace(name=b) for b in sorted(self.branches)])

    def create_branch(self, repo_id, branch, exist_ok):
        self.branches.add(branch)

    def upload_folder(self, folder_path, repo_id, revision, commit_message):
        self.calls.append(
            (
                "upload_folder",
                repo_id,
                revision,
                sorted(p.name for p in __import__("pathlib").Path(folder_path).iterdir()),
            )
        )


def test_hub_upload_is_private_one_branch_per_run_and_never_overwrites(
    tmp_path, target, tokenizer, monkeypatch, capsys
):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    d = published_drafter(tmp_path / "d", target, tokenizer)
    api = _RecordingHub()
    revision = push_to_hub(d, "me/toy-draft", api=api)
    assert revision == "run-20261122T100000-01234567"
    assert api.calls[0] == ("create_repo", "me/toy-draft", True)  # private by default
    assert (
        api.calls[1][:3] == ("upload_folder", "me/toy-draft", revision)
        and "drafthub.json" in api.calls[1][3]
        and "README.md" in api.calls[1][3]
    )
    with pytest.raises(PublishError, match="already exists; pass --force"):
        push_to_hub(d, "me/toy-draft", api=api)
    assert push_to_hub(d, "me/toy-draft", force=True, api=api) == revision
    with pytest.raises(PublishError, match="not lossless"):
        push_to_hub(
            published_drafter(tmp_path / "lossy", target, tokenizer, equal=1),
            "me/x",
            api=api,
        )
    assert SECRET not in capsys.readouterr().out
    assert all(SECRET.encode() not in f.read_bytes() for f in d.rglob("*") if f.is_file())
    card = (d / "README.md").read_text()
    assert "model-index:" in card and "value: 2.5000" in card  # τ for the Hub's metadata


def _script(*args):
    code, out, err = run_push(list(args))
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def test_script_dry_run_list_and_refusal(tmp_path, target, tokenizer):
    d = published_drafter(tmp_path / "d", target, tokenizer)
    hub = tmp_path / "hub"
    r = _script(d, "--hub-dir", hub, "--dry-run")
    assert r.returncode == 0 and "would publish to" in r.stdout and "model.safetensors" in r.stdout and not hub.exists()
    r = _script(d, "--repo-id", "me/x", "--dry-run")
    assert r.returncode == 0 and "me/x@run-20261122T100000-01234567 (private)" in r.stdout
    assert _script(d, "--hub-dir", hub, "--no-verify").returncode == 0
    r = _script("--list", "--hub-dir", hub, "--target", "toyworld:micro")
    assert r.returncode == 0 and r.stdout.split("\n")[1].startswith(
        "toyworld:micro\ttoy-draft v1\tdraft LM\tdraft_lm\t2.500"
    )
    shutil.copytree(d, tmp_path / "weak")
    r = _script(tmp_path / "weak", "--hub-dir", hub, "--min-tau", "4")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: refusing to publish {tmp_path / 'weak'}: τ=2.500 is below min_tau=4.0; train longer or lower the bar"
    ]
    assert len(read_index(hub)) == 1


def test_racing_publishes_each_get_a_version_and_an_index_row(tmp_path, target, tokenizer, monkeypatch):
    """Two publishes at once (threads; the window between a version's rename and the index update widened):
    the registry's lock serialises them, so neither version nor row is lost."""
    import threading
    import time

    from train.registry import local_hub

    drafters = [published_drafter(tmp_path / f"d{i}", target, tokenizer, tau=2.5 - i / 4) for i in range(2)]
    hub = tmp_path / "hub"
    monkeypatch.setattr(local_hub, "_before_index", lambda: time.sleep(0.5))
    # Gated here, before the threads: transformers' loading is not thread-safe (from_pretrained patches
    # PreTrainedModel.tie_weights on the class while it loads), and processes, which publishers are, don't share it.
    gated = [check_publishable(d) for d in drafters]
    threads = [
        threading.Thread(target=publish_local, args=(d, hub), kwargs={"verify_prompts": 0, "gated": g})
        for d, g in zip(drafters, gated)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e["version"] for e in read_index(hub)) == [1, 2]
    assert sorted(p.name for p in (hub / "toyworld--micro" / "toy-draft").iterdir()) == ["v1", "v2"]


def test_a_publish_killed_before_the_index_update_is_indexed_by_the_next(tmp_path, target, tokenizer, monkeypatch):
    from train.registry import local_hub

    d, d2, d3 = (published_drafter(tmp_path / f"d{i}", target, tokenizer, tau=2.5 - i / 4) for i in range(3))
    hub = tmp_path / "hub"
    publish_local(d, hub, verify_prompts=0)

    def killed():
        raise KeyboardInterrupt  # the process dies here: v2 is on disk, the index does not list it

    monkeypatch.setattr(local_hub, "_before_index", killed)
    with pytest.raises(KeyboardInterrupt):
        publish_local(d2, hub, verify_prompts=0)
    assert [e["version"] for e in read_index(hub)] == [1]
    monkeypatch.setattr(local_hub, "_before_index", lambda: None)
    (hub / "toyworld--micro" / "toy-draft" / ".v3-abcd1234").mkdir()  # a copy a kill interrupted
    (hub / ".index.json.4242-deadbeef.tmp").write_text("{")  # an index write a kill interrupted
    assert publish_local(d2, hub, verify_prompts=0)["version"] == 2  # the rerun: indexed, not copied again
    publish_local(d3, hub, verify_prompts=0)
    index = read_index(hub)
    assert [e["version"] for e in index] == [1, 2, 3]
    assert served_files_hash(hub / index[1]["path"]) == served_files_hash(d2)
    assert not list(hub.rglob(".v*-*")) and not list(hub.glob(".*.tmp"))
    assert "toy-draft v2" in (hub / "site" / "toyworld--micro" / "index.html").read_text()


def _measured(path, target, tokenizer, micro_world, prompt_ids):
    """A drafter directory whose figures were really measured (evaluate on 3 held-out prompts), as eval writes them."""
    from eval.config import EvalConfig
    from eval.proposers import load_proposer
    from eval.run import evaluate

    out = tiny_export(path, target, tokenizer)
    cfg = EvalConfig(num_prompts=3, max_new_tokens=12, num_speculative_tokens=2, gamma_sweep=[], warmup_prompts=0)
    proposer, kind = load_proposer(read_export(out), target, len(tokenizer), cfg, torch.device("cpu"))
    names = {"target": "toyworld:micro", "drafter": str(out), "kind": kind, "export_sha256": served_files_hash(out)}
    evals = path.parent / f"{path.name}-eval"
    eos = eos_token_ids(target, tokenizer)
    report = evaluate(target, proposer, prompt_ids[:3], cfg, eos, len(tokenizer), names, out_dir=evals, progress=False)
    prov = {
        "kind": "draft_lm",
        "model_name": "measured",
        "target": {"name_or_path": "toyworld:micro", "resolved": str(micro_world.target_dir)},
        "eval": report,
        "export_sha256": report["export_sha256"],
        "created": "2026-11-22T10:00:00Z",
        "recipe": {
            "recipe_name": "t",
            "publish": {"min_tau": 1.0},
        },  # random weights: τ 1.000, published under a bar of 1
    }
    write_provenance(out, prov, (evals / "eval_samples.jsonl").read_text())
    return out


def test_the_registry_re_measures_a_claim_and_refuses_one_it_cannot_reproduce(
    tmp_path, target, tokenizer, micro_world, prompt_ids
):
    d = _measured(tmp_path / "honest", target, tokenizer, micro_world, prompt_ids)
    claimed = json.loads((d / "drafthub.json").read_text())["eval"]
    hub = tmp_path / "hub"
    entry = publish_local(d, hub, verify_prompts=3)  # the registry's default: re-measure
    verified = entry["verified"]
    assert verified["prompts"] == 3 and verified["target_outputs_as_recorded"] == 3 and verified["lossless"] is True
    assert verified["tau"] == pytest.approx(claimed["tau"], rel=1e-9)  # same prompts, same machine: the same τ
    board = (hub / "site" / "toyworld--micro" / "index.html").read_text()
    assert read_index(hub)[0]["verified"] == verified and f"re-measured τ {verified['tau']:.3f} on 3 prompts" in board
    # A forger's report: real prompts and samples, a digest recomputed, every figure consistent, τ made up.
    forged = tmp_path / "forged"
    shutil.copytree(d, forged)
    samples = (forged / "eval_samples.jsonl").read_text()
    figures, _ = consistent_report(claimed["export_sha256"], tau=2.9, gamma=2, samples=samples)
    prov = json.loads((forged / "drafthub.json").read_text())
    (forged / "drafthub.json").write_text(json.dumps({**prov, "eval": figures}))
    (forged / "speculation_profile.json").unlink()  # the honest report's profile would give the forgery away
    check_publishable(forged)  # the figures alone pass: only re-measuring catches it
    with pytest.raises(PublishError, match=r"re-measured τ [\d.]+ on 3 of its eval prompts disagrees with the claimed"):
        publish_local(forged, hub, verify_prompts=3)
    assert len(read_index(hub)) == 1


def test_a_drafter_made_elsewhere_is_published_once_drafthub_has_evaluated_it(tmp_path, weak_draft, micro_world):
    """A plain transformers draft model (no drafthub.json): python -m eval record=true records what the gate needs
    in it, and the registry re-measures and hosts it."""
    d = tmp_path / "elsewhere"
    weak_draft.save_pretrained(d)
    with pytest.raises(PublishError, match="no drafthub.json"):
        check_publishable(d)
    code, out, err = run_app(
        "eval",
        [
            f"drafter_dir={d}",
            f"prompts={micro_world.prompts_file('heldout')}",
            f"out_dir={tmp_path / 'ev'}",
            f"target_path={micro_world.target_dir}",
            "eval.num_prompts=3",
            "eval.max_new_tokens=12",
            "eval.gamma_sweep=[]",
            "record=true",
        ],
    )
    assert code == 0, err[-2000:]
    assert "recorded this report in" in out
    with pytest.raises(PublishError, match=r"τ=1\.000 is below min_tau=1\.1"):  # random weights: the default bar
        check_publishable(d)
    prov = check_publishable(d, min_tau=1.0)
    assert prov["evaluated_by"] == "python -m eval" and prov["target"]["resolved"] == str(micro_world.target_dir)
    assert prov["eval"] == json.loads((tmp_path / "ev" / "eval_report.json").read_text())
    entry = publish_local(d, tmp_path / "hub", min_tau=1.0, verify_prompts=3)
    assert entry["kind"] == "draft_lm" and entry["verified"]["tau"] == pytest.approx(prov["eval"]["tau"], rel=1e-9)
    assert (tmp_path / "hub" / entry["path"] / "README.md").read_text().count("made elsewhere and measured") == 1


def test_a_drafter_with_another_tokenizer_is_refused_whatever_its_tau(tmp_path, weak_draft, micro_world):
    """Its drafts are ids of other text: τ only measures the target, and "lossless" is true of any drafter."""
    from distill.toyworld.tokenizer import train_tokenizer

    d = tmp_path / "other-vocabulary"
    weak_draft.save_pretrained(d)
    train_tokenizer(["def f(x):\n    return x\n" * 50], vocab_size=300).save_pretrained(d)
    argv = [
        f"drafter_dir={d}",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path / 'ev'}",
        f"target_path={micro_world.target_dir}",
        "eval.num_prompts=2",
        "eval.max_new_tokens=8",
        "eval.gamma_sweep=[]",
        "record=true",
    ]
    code, _, err = run_app("eval", argv)
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "ev" / "eval_report.json").read_text())["tokenizer_matches_target"] is False
    with pytest.raises(PublishError, match="its tokenizer is not the target's"):
        check_publishable(d, min_tau=1.0)
