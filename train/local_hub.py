"""A local model hub: a registry folder of published drafters, versioned, with an index and a catalog.

Layout (`--hub-dir PATH`):
    PATH/index.json                   every published drafter: target, kind, τ, α, speed-up, served check, size, date
    PATH/index.html                   a static catalog rendered from index.json, grouped by target
    PATH/<target>/<model_name>/v<N>/  one immutable version per publish (the drafter directory)

One publish at a time holds the registry's lock. Each version is copied into a temporary sibling and
renamed into place, then index.json/index.html are replaced atomically; a kill in between leaves a
version the index lacks, which the next publish indexes (repair), so no version is ever lost.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from distill.lock import exclusive
from distill.shards import atomic_write_text
from eval.claims import DIGEST
from heads.card import speed_warnings, speedup_text, timing_device
from train.claim_check import VERIFY_PROMPTS, verify_claim
from train.publish import PublishError, check_publishable

INDEX = "index.json"
LOCK_WAIT_SECONDS = 600.0  # a racing publish waits this long for the one ahead of it (copies can be large)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip("-") or "unnamed"


def read_index(hub_dir: str | Path) -> list[dict]:
    path = Path(hub_dir) / INDEX
    return json.loads(path.read_text())["drafters"] if path.exists() else []


def _entry(prov: dict, dest: Path, hub: Path, published: str) -> dict:
    """The index row of one version directory, from its gated provenance."""
    ev = prov["eval"]
    served = ev.get("served")
    return {
        "target": prov["target"]["name_or_path"],
        "model_name": prov.get("model_name") or dest.parent.name,
        "version": int(dest.name[1:]),
        "kind": prov.get("kind"),
        "tau": ev["tau"],
        "alpha": ev.get("alpha"),
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
            "version": served["vllm_version"],
            "tau": served["tau"],
            "verdict": served["verdict"],
            "speedup": served.get("speedup"),
        },
        "size_bytes": sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()),
        "path": dest.relative_to(hub).as_posix(),
        "export_sha256": prov.get("export_sha256"),
        "figures_sha256": ev.get(DIGEST),
        "published": published,
        "verified": None,  # the re-measured figures (train/claim_check.py), where the publish re-measured
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _version_dirs(hub: Path) -> list[Path]:
    return sorted(p for p in hub.glob("*/*/v*") if p.is_dir() and p.name[1:].isdigit())


def repair(hub: Path) -> list[dict]:
    """The index made consistent with the versions on disk, after whatever a killed publish left (call locked).

    A kill can leave a staging directory (`.vN-*`), a temporary index file, or a version renamed into
    place but not yet indexed; the first two are removed, the last is indexed (it passed the gate
    before it was renamed). Returns the index rows."""
    for debris in [*hub.glob("*/*/.v*-*"), *hub.glob(".*.tmp")]:
        print(f"[registry] removing {debris.relative_to(hub)}, left by an interrupted publish", file=sys.stderr)
        shutil.rmtree(debris) if debris.is_dir() else debris.unlink()
    rows = [d for d in read_index(hub) if (hub / d["path"]).is_dir()]
    indexed = {d["path"] for d in rows}
    for version in _version_dirs(hub):
        if version.relative_to(hub).as_posix() not in indexed:
            prov = json.loads((version / "drafthub.json").read_text())
            published = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(version.stat().st_mtime))
            rows.append(_entry(prov, version, hub, published))
            print(f"[registry] indexing {version.relative_to(hub)}, published by an interrupted run", file=sys.stderr)
    if rows != read_index(hub):
        _write_index(hub, rows)
    return rows


def _write_index(hub: Path, rows: list[dict]) -> None:
    atomic_write_text(hub / INDEX, json.dumps({"drafters": rows}, indent=2))
    atomic_write_text(hub / "index.html", render_catalog(rows))


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
        gated: the provenance the caller has just passed through train.publish.gate (the publish stage).
        verify_prompts: eval prompts re-decoded before publishing (train/claim_check.py); 0 = trust the figures.
        verified: the re-measured figures, where the caller has just re-measured them.
    """
    prov = gated if gated is not None else check_publishable(drafter_dir, min_tau)
    if verified is None and verify_prompts:
        verified = verify_claim(drafter_dir, prov, verify_prompts)  # outside the lock: other publishes go on
    hub = Path(hub_dir)
    with exclusive(hub, "registry", wait_seconds=LOCK_WAIT_SECONDS):
        rows = repair(hub)
        base = hub / _slug(prov["target"]["name_or_path"]) / _slug(prov.get("model_name") or Path(drafter_dir).name)
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


def _fmt(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


def _verified(v: Optional[dict]) -> str:
    return "–" if not v else f"τ {v['tau']:.3f} on {v['prompts']} prompts ({v['device']})"


def render_catalog(drafters: list[dict]) -> str:
    """A static HTML page: one table per target, best τ first."""
    sections = []
    for target in sorted({d["target"] for d in drafters}):
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(c))}</td>"
                for c in (
                    f"{d['model_name']} v{d['version']}",
                    d["kind"],
                    _fmt(d["tau"]),
                    _fmt(d["alpha"]),
                    speedup_text(d) + f" on {d.get('speed_device')}" + (" ⚠️" if d.get("speed_warnings") else ""),
                    "–"
                    if not d["served"]
                    else f"{d['served']['verdict']} (vLLM {d['served']['version']}, τ {d['served']['tau']:.3f})",
                    _verified(d.get("verified")),
                    f"{d['size_bytes'] / 1e6:.1f} MB",
                    d["published"][:10],
                )
            )
            + f'<td><a href="{html.escape(d["path"])}/README.md">card</a></td></tr>'
            for d in sorted((d for d in drafters if d["target"] == target), key=lambda d: -d["tau"])
        )
        sections.append(
            f"<h2>{html.escape(target)}</h2>\n<table><tr><th>drafter</th><th>kind</th><th>τ</th><th>α</th>"
            "<th>speed-up</th><th>served check</th><th>re-measured</th><th>size</th><th>published</th><th></th></tr>"
            f"{rows}</table>"
        )
    body = "\n".join(sections) or "<p>No drafters published yet.</p>"
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>drafthub registry</title></head><body>\n'
        f"<h1>drafthub registry</h1>\n{body}\n</body></html>\n"
    )
