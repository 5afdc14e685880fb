"""The publish gate and the Hugging Face Hub upload, shared by the publish stage and scripts/push_to_hub.py.

A drafter leaves the machine only when its own `drafthub.json` proves it: an eval report exists,
its figures are the ones eval measured (their digest, eval/claims.py) and agree with each other and
with the samples beside them, it was measured on exactly these files (the export hash inside the
report still matches), it was lossless, it reached the recipe's `min_tau`, the format checks pass,
and — where a served check ran — vLLM agreed. `--verify` (train/registry/claim_check.py) re-measures τ on
top. Every refusal is one `PublishError` line naming the fix.

The Hub token is never passed through here: huggingface_hub takes it from HF_TOKEN or the saved
login (we only ask whether there is one), and nothing of ours prints or stores it. A missing token,
a refused one or an unreachable Hub is one PublishError line too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from eval.claims import DIGEST, figures_digest, inconsistencies, samples_digest
from eval.report import SAMPLES, read_samples
from heads.card import speed_warnings
from heads.families import get_family
from heads.formats.fingerprint import PROFILE_FILE, served_files_hash
from train.config import PublishConfig

DEFAULT_MIN_TAU = PublishConfig.min_tau  # the bar where a provenance names none


class PublishError(ValueError):
    """A drafter that must not be published, or a bad publish request: problem and fix in one line."""


def read_provenance(drafter_dir: str | Path) -> dict:
    path = Path(drafter_dir) / "drafthub.json"
    if not Path(drafter_dir).is_dir():
        raise PublishError(f"{drafter_dir} is not a directory; pass an exported drafter directory")
    if not path.exists():
        raise PublishError(
            f"{drafter_dir} has no drafthub.json; publish drafters exported by `python -m train` (its publish stage)"
        )
    return json.loads(path.read_text())


def _check_format(drafter_dir: Path, kind: str) -> None:
    """The family's own format checks (heads.families: lint), e.g. EAGLE-3's heads/lint.py."""
    try:
        get_family(kind).lint(drafter_dir)
    # Any loader failure (safetensors, transformers, ours) is a refusal, said in one line.
    except Exception as e:  # noqa: BLE001
        raise PublishError(
            f"refusing to publish {drafter_dir}: the {kind} checkpoint does not pass its format checks "
            f"({str(e).splitlines()[0]})"
        ) from None


def check_report(report: Optional[dict], min_tau: float, name: str, samples_path: Optional[Path] = None) -> None:
    """Refuse a missing, edited, inconsistent, lossy, below-bar or served-broken eval report of drafter `name`.

    Args:
        samples_path: eval_samples.jsonl beside the report, where at hand: bound by the report's
            samples_sha256 and checked against its lossless claim.
    """
    if not report or "tau" not in report:
        raise PublishError(f"refusing to publish {name}: no eval report; run the eval stage, then publish")
    if report.get(DIGEST) != figures_digest(report):
        raise PublishError(
            f"refusing to publish {name}: its eval figures are not the ones eval measured (the {DIGEST} over them "
            "does not match: edited or from an older drafthub); re-run eval on this drafter, then publish"
        )
    samples = None
    if samples_path is not None and samples_path.exists():
        text = samples_path.read_text()
        if samples_digest(text) != report.get("samples_sha256"):
            raise PublishError(
                f"refusing to publish {name}: {samples_path} is not the samples file eval wrote with this report; "
                "re-run eval, then publish"
            )
        samples = read_samples(samples_path)
    problems = inconsistencies(report, samples)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PublishError(
            f"refusing to publish {name}: its eval figures contradict each other: {problems[0]}{more}; "
            "re-run eval, then publish"
        )
    if report.get("lossless") is False:
        raise PublishError(
            f"refusing to publish {name}: speculative output differed from the target's on "
            f"{report['settings']['num_prompts'] - report['lossless_prompts']} of {report['settings']['num_prompts']} "
            "prompts (not lossless); see eval_samples.jsonl"
        )
    if report.get("tokenizer_matches_target") is False:
        raise PublishError(
            f"refusing to publish {name}: its tokenizer is not the target's (another vocabulary), so its drafts "
            "mean other text and τ only measures the target; train the drafter with the target's tokenizer"
        )
    if (report.get("prompts") or {}).get("overlap"):
        raise PublishError(
            f"refusing to publish {name}: {report['prompts']['overlap']} of its eval prompts were in its training "
            "data, so its τ is not a held-out figure; re-run eval on held-out prompts (eval_prompts or eval_split)"
        )
    if report["tau"] < min_tau:
        raise PublishError(
            f"refusing to publish {name}: τ={report['tau']:.3f} is below min_tau={min_tau}; "
            "train longer or lower the bar"
        )
    served = report.get("served")
    if served and served.get("verdict") != "ok":
        raise PublishError(
            f"refusing to publish {name}: the served check failed ({served.get('reason')}); "
            f"fix the export and re-run eval with eval.serve={served.get('engine', 'vllm')}"
        )


def _check_profile(report: dict, d: Path) -> None:
    """speculation_profile.json, where present, must be the report's own (schedulers read the file, not the report)."""
    file = d / PROFILE_FILE
    if file.exists() and json.loads(file.read_text()) != report.get("speculation_profile"):
        raise PublishError(
            f"refusing to publish {d}: {PROFILE_FILE} is not the acceptance profile of its eval report (edited, or "
            "left from another run); re-run the publish stage (or python -m eval record=true) to rewrite it"
        )


def gate(provenance: dict, drafter_dir: str | Path, min_tau: Optional[float] = None) -> dict:
    """Raise PublishError unless `drafter_dir`, described by `provenance`, may be published; return provenance.

    Args:
        min_tau: the bar; None = the recipe's publish.min_tau recorded in the provenance.
    """
    d = Path(drafter_dir)
    report = provenance.get("eval")
    if not report or "tau" not in report:
        raise PublishError(
            f"refusing to publish {d}: no eval report recorded in its drafthub.json; run the pipeline's eval stage, "
            f"or python -m eval drafter_dir={d} … record=true (without record=true the report stays in out_dir)"
        )
    if report.get("export_sha256") != served_files_hash(d):
        raise PublishError(
            f"refusing to publish {d}: its files are not the ones evaluated (stale eval report: the export hash in "
            "drafthub.json does not match); re-run eval (python -m eval … record=true) and publish on this checkpoint"
        )
    bar = (
        min_tau
        if min_tau is not None
        else ((provenance.get("recipe") or {}).get("publish") or {}).get("min_tau", DEFAULT_MIN_TAU)
    )
    check_report(report, bar, str(d), d / SAMPLES)
    _check_profile(report, d)
    if "kind" not in provenance:
        raise PublishError(f"refusing to publish {d}: drafthub.json names no drafter kind; re-run the publish stage")
    _check_format(d, provenance["kind"])
    for warning in speed_warnings(report):  # publishable, but nobody should read the speed-up unwarned
        print(f"warning: {d}: {warning}", file=sys.stderr)
    return provenance


def check_publishable(drafter_dir: str | Path, min_tau: Optional[float] = None) -> dict:
    """The gate for a directory on disk (its own drafthub.json); returns that provenance."""
    return gate(read_provenance(drafter_dir), drafter_dir, min_tau)


def upload_files(drafter_dir: str | Path) -> list[tuple[str, int]]:
    """(relative path, bytes) of everything an upload sends, in path order (what --dry-run lists)."""
    root = Path(drafter_dir)
    return [(p.relative_to(root).as_posix(), p.stat().st_size) for p in sorted(root.rglob("*")) if p.is_file()]


def run_revision(prov: dict) -> str:
    """One Hub branch per run: the publish time and the run's stage hash, e.g. run-20261122T031500-8776177e."""
    created = prov.get("created", "").replace("-", "").replace(":", "").rstrip("Z")
    return f"run-{created}-{str(prov.get('stage_hash', ''))[:8]}"


NO_TOKEN = "no Hugging Face token: run `hf auth login` or set HF_TOKEN"
# "could not connect / timed out" in each HTTP client huggingface_hub has used (1.x/2.x: httpx2 or httpx, 0.x: requests)
_CLIENT_NETWORK_ERRORS = {
    "httpx2": ("TransportError",),
    "httpx": ("TransportError",),
    "requests": ("ConnectionError", "Timeout"),
}


def _network_errors() -> tuple[type[BaseException], ...]:
    """What "the Hub could not be reached" raises, for whichever HTTP client this huggingface_hub uses."""
    import importlib

    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]  # OfflineModeIsEnabled is a ConnectionError
    for client, names in _CLIENT_NETWORK_ERRORS.items():
        try:
            module = importlib.import_module(client)
        except ImportError:
            continue
        errors += [getattr(module, name) for name in names if hasattr(module, name)]
    return tuple(errors)


def _unreachable(e: BaseException) -> PublishError:
    from huggingface_hub import constants

    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return PublishError(
        f"could not reach the Hugging Face Hub ({constants.ENDPOINT}: {reason}); check the network or publish to a "
        "local registry with --hub-dir / publish.hub_dir"
    )


def require_hub_token() -> None:
    """Refuse an upload before any work when no token is configured (asked only whether one exists: never kept)."""
    from huggingface_hub import get_token

    try:
        missing = get_token() is None
    except _network_errors() as e:  # HF_OIDC_RESOURCE set: the token comes from an exchange over the network
        raise _unreachable(e) from None
    if missing:
        raise PublishError(NO_TOKEN)


def _hub_refusal(e: Exception, repo_id: str) -> PublishError | None:
    """One line for an HTTP error of the Hub; None for anything else."""
    from huggingface_hub.errors import HfHubHTTPError

    if not isinstance(e, HfHubHTTPError):
        return None
    status = getattr(e.response, "status_code", None)
    if status == 401:
        return PublishError(
            "the Hugging Face Hub refused the token (401 Unauthorized); run `hf auth login` again or set HF_TOKEN"
        )
    if status == 403:
        return PublishError(
            f"the Hugging Face token may not write to {repo_id} (403 Forbidden); use a token with write access "
            "or a --repo-id under your own name"
        )
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return PublishError(f"the Hugging Face Hub refused the upload to {repo_id} ({reason}); check the repo id and rerun")


def push_to_hub(
    drafter_dir: str | Path,
    repo_id: str,
    *,
    private: bool = True,
    force: bool = False,
    revision: Optional[str] = None,
    api=None,
    gated: Optional[dict] = None,
) -> str:
    """Upload a gated drafter to `repo_id` on its own branch; return the revision.

    The repository is created private unless asked otherwise; an existing branch of the same
    name (the same run pushed twice) is only overwritten with force=True. `gated`: the provenance
    the caller has just passed through `gate` (the publish stage), so the gate runs once.
    """
    if api is None:
        require_hub_token()  # before the gate's work: nothing to upload with
    prov = gated if gated is not None else check_publishable(drafter_dir)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()  # token: HF_TOKEN or the saved `hf auth login`, never passed through our code
    revision = revision or run_revision(prov)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        branches = {b.name for b in api.list_repo_refs(repo_id).branches}
        if revision in branches and not force:
            raise PublishError(
                f"{repo_id}@{revision} already exists; pass --force to overwrite it or --revision NAME for a new branch"
            )
        api.create_branch(repo_id, branch=revision, exist_ok=True)
        api.upload_folder(
            folder_path=str(drafter_dir),
            repo_id=repo_id,
            revision=revision,
            commit_message=f"drafthub: {prov.get('model_name')} ({prov.get('kind')}) τ={prov['eval']['tau']:.3f}",
        )
    except _network_errors() as e:
        raise _unreachable(e) from None
    except Exception as e:
        refusal = _hub_refusal(e, repo_id)
        if refusal is None:
            raise
        raise refusal from None
    return revision
