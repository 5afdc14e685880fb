"""The local registry as a static site: a front page of targets, a leaderboard per target, a page per drafter
version and a compare view, rendered from index.json (the one source `push_to_hub.py --list` reads too).

    python -m http.server -d HUB_DIR      # or open HUB_DIR/index.html from disk: no server is needed

Layout inside the registry:
    index.html                            the front page: targets, drafters per target, the best served τ
    site -> .site-<id>/                   a link swapped atomically to each new build (the previous one is kept
                                          for readers mid-page; older ones are removed)
    site/<target>/index.html              the target's leaderboard (sortable, filterable by family)
    site/<target>/compare.html#v=A&v=B    drafters of that target side by side
    site/<target>/<model>/v<N>.html       one drafter version: card, plots, served check, snippets, provenance, files
    site/static/, site/plots/             the stylesheet and scripts (no CDN, fonts or external scripts: the hub
                                          may live on an air-gapped network); the plots, kept between builds

Called with the registry's lock held (train/registry/local_hub.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from heads.formats.staging import atomic_write_text

SITE = "site"
BUILT_FROM = "index.sha256"  # inside a build: the digest of the index rows it was rendered from
STATIC = Path(__file__).parent / "static"


def rows_digest(rows: list[dict]) -> str:
    """What a build renders: these rows, with this renderer (a drafthub upgrade renders the site again)."""
    return hashlib.sha256((json.dumps(rows, sort_keys=True) + _renderer()).encode()).hexdigest()


@functools.cache
def _renderer() -> str:
    """A digest of the templates, the static files and the code that fills them."""
    here = Path(__file__).parent
    files = sorted([*here.rglob("*.html"), *STATIC.iterdir(), here / "pages.py", here.parent / "hub_columns.py"])
    return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()


def site_is_stale(hub: Path, rows: list[dict]) -> bool:
    """Whether the site was rendered from other rows than these (or never rendered)."""
    built, front, digest = hub / SITE / BUILT_FROM, hub / "index.html", rows_digest(rows)
    fresh = built.is_file() and built.read_text() == digest and front.is_file() and digest in front.read_text()
    return not fresh


def write_site(hub: Path, rows: list[dict]) -> None:
    """Render the whole site from `rows` into a fresh build, swap the `site` link to it, then the front page."""
    from train.registry.site.pages import render_site

    link = hub / SITE
    previous = link.resolve() if link.is_symlink() else None
    build = Path(tempfile.mkdtemp(prefix=f".{SITE}-", dir=hub))
    try:
        shutil.copytree(STATIC, build / "static")
        front = render_site(hub, rows, build, previous, rows_digest(rows))
        (build / BUILT_FROM).write_text(rows_digest(rows))
        os.chmod(build, 0o755)  # mkdtemp's 0700 would hide the site from other users of a shared registry
        _swap(link, build)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    atomic_write_text(hub / "index.html", front)  # names the digest too: a kill before this line leaves it stale
    for old in hub.glob(f".{SITE}-*"):  # builds no link points to any more
        if old not in (build, previous) and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def _swap(link: Path, build: Path) -> None:
    """Point `link` at `build` in one rename: a reader sees the old site or the new one, never a mix."""
    if link.exists() and not link.is_symlink():  # a plain folder (a copy made with links followed): set aside
        os.replace(link, link.with_name(f".{SITE}-copied-{secrets.token_hex(4)}"))
    tmp = link.with_name(f".{SITE}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    os.symlink(build.name, tmp)
    os.replace(tmp, link)
