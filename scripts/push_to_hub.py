"""Publish a drafter directory — gated — to the Hugging Face Hub or a local registry, or list a registry.

    python scripts/push_to_hub.py DRAFTER_DIR --repo-id me/my-drafter [--public] [--revision NAME] [--force] [--dry-run]
    python scripts/push_to_hub.py DRAFTER_DIR --hub-dir PATH [--dry-run] [--no-verify]
    python scripts/push_to_hub.py --list --hub-dir PATH [--target NAME]
    python scripts/push_to_hub.py --site --hub-dir PATH      # render the registry's site again (after an upgrade)

The gate (train/registry/gate.py) refuses a drafter whose eval report is missing, stale, not lossless,
below its recipe's min_tau, rejected by the format checks or by the served check, whose figures were
edited or contradict each other, or (re-measured: always for a registry, with --verify for the Hub)
whose τ this machine does not reproduce. The Hub token
comes from HF_TOKEN or `hf auth login`; this script only checks that one is there, and never prints or writes it.
No token, a refused one or no network is one `error:` line (exit 2), like every refusal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from train.registry.claim_check import VERIFY_PROMPTS, verify_claim  # noqa: E402
from train.registry.gate import (  # noqa: E402
    PublishError,
    check_publishable,
    push_to_hub,
    require_hub_token,
    run_revision,
    upload_files,
)
from train.registry.hub_columns import list_header, list_line  # noqa: E402
from train.registry.local_hub import list_drafters, publish_local, rebuild_site  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafter_dir", nargs="?", help="an exported drafter directory (runs/<recipe>/<ts>/drafter)")
    ap.add_argument("--repo-id", help="Hugging Face repo to upload to (created private unless --public)")
    ap.add_argument("--hub-dir", help="a local registry folder instead of the Hub")
    ap.add_argument("--revision", help="Hub branch (default: run-<publish time>-<stage hash>, one per run)")
    ap.add_argument("--public", action="store_true", help="create the Hub repo public")
    ap.add_argument("--force", action="store_true", help="overwrite an existing branch of the same name")
    ap.add_argument("--min-tau", type=float, help="override the recipe's publish.min_tau")
    ap.add_argument(
        "--dry-run", action="store_true", help="check the gate and list what would be uploaded, upload nothing"
    )
    ap.add_argument("--verify", action="store_true", help="re-measure τ before a Hub upload (the registry always does)")
    ap.add_argument("--no-verify", action="store_true", help="publish to a registry without re-measuring τ")
    ap.add_argument("--verify-prompts", type=int, default=VERIFY_PROMPTS, help="eval prompts re-decoded to verify")
    ap.add_argument(
        "--list", action="store_true", help="print a registry's drafters, best τ first, as its site shows them"
    )
    ap.add_argument("--site", action="store_true", help="render a registry's site (HUB_DIR/index.html) again")
    ap.add_argument("--target", help="with --list: only this target's drafters")
    args = ap.parse_args(argv)
    try:
        if (args.list or args.site) and not args.hub_dir:
            raise PublishError(f"--{'list' if args.list else 'site'} reads a local registry; pass --hub-dir PATH")
        if args.list:
            print(list_header())
            for d in list_drafters(args.hub_dir, args.target):
                print(list_line(d))
            return 0
        if args.site:
            rows = rebuild_site(args.hub_dir)
            print(f"rendered {Path(args.hub_dir) / 'index.html'} ({len(rows)} drafters)")
            return 0
        if not args.drafter_dir or bool(args.repo_id) == bool(args.hub_dir):
            raise PublishError(
                "give DRAFTER_DIR and exactly one of --repo-id NAME (Hugging Face Hub) "
                "or --hub-dir PATH (local registry)"
            )
        if args.dry_run:
            prov = check_publishable(args.drafter_dir, args.min_tau)
            where = (
                f"{args.hub_dir} (next version of {prov.get('model_name')})"
                if args.hub_dir
                else f"{args.repo_id}@{args.revision or run_revision(prov)} ({'public' if args.public else 'private'})"
            )
            print(f"would publish to {where}:")
            for path, size in upload_files(args.drafter_dir):
                print(f"  {path}\t{size} bytes")
            return 0
        if args.hub_dir:
            prompts = 0 if args.no_verify else args.verify_prompts
            entry = publish_local(args.drafter_dir, args.hub_dir, args.min_tau, verify_prompts=prompts)
            verified = entry["verified"]
            note = f" (re-measured τ {verified['tau']:.3f} on {verified['prompts']} prompts)" if verified else ""
            print(f"published {args.hub_dir}/{entry['path']}{note}")
        else:
            require_hub_token()  # before a --verify re-measure: no upload could follow it
            if args.min_tau is not None or args.verify:
                prov = check_publishable(args.drafter_dir, args.min_tau)
                if args.verify:
                    verify_claim(args.drafter_dir, prov, args.verify_prompts)
            revision = push_to_hub(
                args.drafter_dir, args.repo_id, private=not args.public, force=args.force, revision=args.revision
            )
            print(f"published https://huggingface.co/{args.repo_id}/tree/{revision}")
    except PublishError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
