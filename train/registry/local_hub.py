"""A local model hub: a registry folder of published drafters, versioned, with an index and a catalog.

Layout (`--hub-dir PATH`):
    PATH/index.json                   every published drafter: target, kind, τ, α, speed-up, served check, size, date,
                                      parameters, training data, per-position acceptance, files with their hashes
    PATH/index.html, PATH/site/       the static site rendered from index.json (train/hub_site): front page,
                                      leaderboards, drafter pages, compare views
    PATH/<target>/<model_name>/v<N>/  one immutable version per publish (the drafter directory)

One publish at a time holds the registry's lock. Each version is copied into a temporary sibling and
renamed into place, then index.json and the site are replaced atomically; a kill in between leaves a
version the index lacks, which the next publish indexes (repair), so no version is ever lost.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from distill.lock import exclusive
from eval.claims import DIGEST
from heads.card import speed_warnings, timing_device
from heads.families import get_family
from heads.formats.staging import atomic_write_text
from train.registry.claim_check import VERIFY_PROMPTS, verify_claim
from train.registry.gate import PublishError, check_publishable
from train.registry.site import SITE, site_is_stale, write_site

INDEX = "index.json"
LOCK_WAIT_SECONDS = 600.0  # a racing publish waits this long for the one ahead of it (copies can be large)
ROW_FORMAT = 5  # rows of an older format are derived again from their version's drafthub.json by repair()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip("-") or "unnamed"


def _target_dir(name: str) -> str:
    """The folder of a target's drafters; never the site's folder."""
    slug = _slug(name)
    return f"target-{slug}" if slug == SITE else slug


def read_index(hub_dir: str | Path) -> list[dict]:
    path = Path(hub_dir) / INDEX
    return json.loads(path.read_text())["drafters"] if path.exists() else []


def _entry(prov: dict, dest: Path, hub: Path, published: str) -> dict:
    """The index row of one version directory, from its gated provenance."""
    ev = prov["eval"]
    served = ev.get("served")
    files = _files(dest)
    return {
        "row_format": ROW_FORMAT,
        "target": prov["target"]["name_or_path"],
        "model_name": prov.get("model_name") or dest.parent.name,
        "version": int(dest.name[1:]),
        "kind": prov.get("kind"),
        "category": get_family(prov["kind"]).category,
        "tau": ev["tau"],
        "alpha": ev.get("alpha"),
        "per_position_acceptance": ev.get("per_position_acceptance") or [],
        "num_speculative_tokens": (ev.get("settings") or {}).get("num_speculative_tokens"),
        "speedup": ev.get("speedup"),
        "speedup_spread": {k: ev["speedup_spread"][k] for k in ("low", "high", "level")}
        if ev.get("speedup_spread")
        else None,
        "speed_device": timing_device(ev),
        "speed_warnings": speed_warnings(ev),
        "served": None
        if not served
        else {
            "engine": served["engine"],
            "version": served.get("engine_version") or served.get("vllm_version"),
            "tau": served["tau"],
            "ours_tau": (served.get("ours") or {}).get("tau"),  # ours counted as the engine counts
            "verdict": served["verdict"],
            "speedup": served.get("speedup"),  # tokens/s with the drafter over without, on the engine
            "speedup_spread": _interval(served.get("speedup_spread")),
        },
        # the break-even concurrency of a load sweep (eval.serve_load), where one ran
        "serving_load": None if not ev.get("serving_load") else {"break_even": ev["serving_load"]["break_even"]},
        "parameters": _parameters(dest),
        "training_samples": (prov.get("training_data") or {}).get("samples"),  # None: nothing was trained
        "training_steps": (prov.get("training_data") or {}).get("optimizer_steps"),
        # the version whose training this one extends (trainer.continue_from), where that run was published
        "continues": (prov.get("continues") or {}).get("published"),
        "size_bytes": sum(f["bytes"] for f in files),
        "files": files,
        "path": dest.relative_to(hub).as_posix(),
        "export_sha256": prov.get("export_sha256"),
        "figures_sha256": ev.get(DIGEST),
        "published": published,
        "verified": None,  # the re-measured figures (train/registry/claim_check.py), where the publish re-measured
    }


def _interval(spread: Optional[dict]) -> Optional[dict]:
    """A speed-up's 95% interval as a row keeps it (its per-prompt ratios stay in the version's drafthub.json)."""
    return None if not spread else {k: spread[k] for k in ("low", "high", "level") if k in spread}


def _files(version: Path) -> list[dict]:
    """Every file of a version with its size and sha256 (hashed once, at publish: versions never change)."""
    return [
        {"path": p.relative_to(version).as_posix(), "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(version.rglob("*"))
        if p.is_file()
    ]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _parameters(version: Path) -> int:
    """Weights the drafter ships: elements of the top-level safetensors files, read from their headers (a copy in
    another layout, EAGLE-3's sglang/, is not counted twice; weights shared with the target are not shipped)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(version.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            total += sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())
    return total


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _is_site(folder: str) -> bool:
    """The site's link or one of its builds (a target's folder is never named so: _target_dir)."""
    return folder == SITE or folder.startswith(f".{SITE}-")


def _version_dirs(hub: Path) -> list[Path]:
    return sorted(
        p
        for p in hub.glob("*/*/v*")
        if p.is_dir() and p.name[1:].isdigit() and not _is_site(p.relative_to(hub).parts[0])
    )


def repair(hub: Path, render: bool = True) -> list[dict]:
    """The index made consistent with the versions on disk, after whatever a killed publish left (call locked).

    A kill can leave a staging directory (`.vN-*`), a temporary index file, or a version renamed into
    place but not yet indexed; the first two are removed, the last is indexed (it passed the gate
    before it was renamed). render=False leaves the site to the caller. Returns the index rows."""
    for debris in [*hub.glob("*/*/.v*-*"), *hub.glob(".*.tmp")]:
        print(f"[registry] removing {debris.relative_to(hub)}, left by an interrupted publish", file=sys.stderr)
        shutil.rmtree(debris) if debris.is_dir() and not debris.is_symlink() else debris.unlink()
    rows = [_current(hub, d) for d in read_index(hub) if (hub / d["path"]).is_dir()]
    indexed = {d["path"] for d in rows}
    for version in _version_dirs(hub):
        if version.relative_to(hub).as_posix() not in indexed:
            prov = json.loads((version / "drafthub.json").read_text())
            published = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(version.stat().st_mtime))
            rows.append(_entry(prov, version, hub, published))
            print(f"[registry] indexing {version.relative_to(hub)}, published by an interrupted run", file=sys.stderr)
    changed = rows != read_index(hub)
    if changed:
        atomic_write_text(hub / INDEX, json.dumps({"drafters": rows}, indent=2))
    # a kill between index.json and the site, a registry older than the site, or a drafthub with other pages
    if render and (changed or ((hub / INDEX).is_file() and site_is_stale(hub, rows))):
        write_site(hub, rows)
    return rows


def _current(hub: Path, row: dict) -> dict:
    """An index row in this version's format: an older one is derived again from its version's provenance."""
    if row.get("row_format") == ROW_FORMAT:
        return row
    prov = json.loads((hub / row["path"] / "drafthub.json").read_text())
    return _entry(prov, hub / row["path"], hub, row["published"]) | {"verified": row.get("verified")}


def _write_index(hub: Path, rows: list[dict]) -> None:
    """index.json first (the source every view reads), then the site rendered from it."""
    atomic_write_text(hub / INDEX, json.dumps({"drafters": rows}, indent=2))
    write_site(hub, rows)


def rebuild_site(hub_dir: str | Path) -> list[dict]:
    """Repair the registry and render its site again (after upgrading drafthub); return the index rows."""
    hub = Path(hub_dir)
    if not (hub / INDEX).is_file():
        raise PublishError(f"{hub} is not a registry (no {INDEX}); publish a drafter with --hub-dir {hub} first")
    with exclusive(hub, "registry", wait_seconds=LOCK_WAIT_SECONDS):
        rows = repair(hub, render=False)
        write_site(hub, rows)
    return rows


def _before_index() -> None:
    """Test hook: runs between a version's rename into place and the index update (the window a kill hits)."""


def publish_local(
    drafter_dir: str | Path,
    hub_dir: str | Path,
    min_tau: Optional[float] = None,
    *,
    gated: Optional[dict] = None,
    verify_prompts: int = VERIFY_PROMPTS,
    verified: Optional[dict] = None,
) -> dict:
    """Gate, re-measure, then add `drafter_dir` to the registry as the next version of its model; return its row.

    One writer at a time (the registry's lock; others wait up to LOCK_WAIT_SECONDS), so racing
    publishes each get their own version and index row. The same files with the same figures are one
    version: publishing them again (a rerun after a kill) returns the row they already have.

    Args:
        gated: the provenance the caller has just passed through train.registry.gate.gate (the publish stage).
        verify_prompts: eval prompts re-decoded before publishing (registry/claim_check.py); 0 = trust the figures.
        verified: the re-measured figures, where the caller has just re-measured them.
    """
    prov = gated if gated is not None else check_publishable(drafter_dir, min_tau)
    if verified is None and verify_prompts:
        verified = verify_claim(drafter_dir, prov, verify_prompts)  # outside the lock: other publishes go on
    hub = Path(hub_dir)
    with exclusive(hub, "registry", wait_seconds=LOCK_WAIT_SECONDS):
        rows = repair(hub)
        base = (
            hub / _target_dir(prov["target"]["name_or_path"]) / _slug(prov.get("model_name") or Path(drafter_dir).name)
        )
        same = [
            row
            for row in rows
            if row["path"].startswith(f"{base.relative_to(hub).as_posix()}/")
            and (row["export_sha256"], row.get("figures_sha256")) == (prov["export_sha256"], prov["eval"].get(DIGEST))
        ]
        if same:  # these files with these figures are there already (a rerun after a kill, or a second push)
            print(f"[registry] {drafter_dir} is already published as {same[-1]['path']}")
            return same[-1]
        base.mkdir(parents=True, exist_ok=True)
        version = 1 + max((int(p.name[1:]) for p in base.glob("v*") if p.name[1:].isdigit()), default=0)
        dest = base / f"v{version}"
        tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=base))
        try:
            shutil.copytree(drafter_dir, tmp, dirs_exist_ok=True)
            os.replace(tmp, dest)  # complete or absent; an unindexed one is indexed by the next repair()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _before_index()
        entry = _entry(prov, dest, hub, _now()) | {"verified": verified}
        _write_index(hub, rows + [entry])
    return entry


def list_drafters(hub_dir: str | Path, target: Optional[str] = None) -> list[dict]:
    """The registry's drafters (of one target if given), best τ first."""
    rows = [d for d in read_index(hub_dir) if target is None or d["target"] == target]
    if target is not None and not rows:
        known = sorted({d["target"] for d in read_index(hub_dir)})
        raise PublishError(f"no drafter for target {target!r} in {hub_dir}; targets there: {known or 'none'}")
    return sorted(rows, key=lambda d: -d["tau"])
