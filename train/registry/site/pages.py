"""The site's pages, rendered from the index rows (figures) and each version's own files (card, provenance, plots).

Every figure a page prints is a cell of train/registry/hub_columns.py, so the leaderboard, the drafter pages, the
compare view and `push_to_hub.py --list` agree to the character.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from eval.plots import plot_acceptance, plot_load, plot_sweep
from heads.card import served_engine, training_line
from heads.families import CATEGORIES, usage_text
from heads.load_card import LOAD_PLOT, load_section
from train.bakeoff.verdicts import recommend
from train.registry.hub_columns import COLUMNS, cells

FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)  # a model card's HF metadata block
USE_IT = re.compile(r"\A## Use it\n+")  # the card's heading of the usage section (the page has its own)
SPEEDUP_TIE = 0.03  # as the bake-off's recommendation: speed-ups this close count as equal, the higher τ wins
BEST_RULE = (
    "the bake-off's rule: the fastest measured speed-up among drafters whose served check agreed or did not run; "
    f"speed-ups within {SPEEDUP_TIE:.0%} count as equal and the higher τ wins. Each speed-up holds for the device "
    "it names; τ carries over to other hardware"
)


def best_row(rows: list[dict]) -> dict:
    """The drafter a target's leaderboard marks best (BEST_RULE: train/bakeoff/verdicts.py's recommendation)."""
    views = [
        {
            "recipe": i,
            "kind": r["kind"],
            "lossless": True,  # the gate let nothing else in
            "served_verdict": (r.get("served") or {}).get("verdict"),
            "speedup": r.get("speedup") or 0.0,
            "tau": r["tau"],
        }
        for i, r in enumerate(rows)
    ]
    pick = recommend(views, SPEEDUP_TIE)
    return rows[pick["recipe"]] if pick else max(rows, key=lambda r: r["tau"])


def render_site(hub: Path, rows: list[dict], build: Path, previous: Optional[Path], digest: str) -> str:
    """Write the leaderboards, compare views and drafter pages into `build`; return the front page's HTML."""
    env = _environment()
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    boards = []
    for folder, board in _by_target_folder(rows).items():
        best = best_row(board)
        entries = [_entry(r, r is best) for r in board]
        out = build / folder
        # pages two folders down (site/<target>/) and three (site/<target>/<model>/)
        shared = {"root": "../../", "site": "../", "generated": generated, "title": _title(board)}
        deeper = shared | {"root": "../../../", "site": "../../", "best_id": entries[board.index(best)]["id"]}
        leaderboard, compare, drafter = map(env.get_template, ("leaderboard.html", "compare.html", "drafter.html"))
        categories = _categories(board)
        _write(out / "index.html", leaderboard.render(shared, rows=entries, columns=COLUMNS, categories=categories,
                                                      best_rule=BEST_RULE))  # fmt: skip
        _write(out / "compare.html", compare.render(shared, rows=entries, data=_compare_data(entries)))
        for row, entry in zip(board, entries):
            page = _drafter_page(hub, row, entry, build, previous)
            _write(out / f"{entry['id']}.html", drafter.render(deeper, **page))
        boards.append(_board_summary(board, best, folder))
    front = env.get_template("front.html")
    return front.render(root="", site="site/", generated=generated, title="drafthub registry", boards=boards,
                        digest=digest, total=len(rows), best_rule=BEST_RULE)  # fmt: skip


def _board_summary(board: list[dict], best: dict, folder: str) -> dict:
    """A target's line on the front page."""
    served = [r["served"]["tau"] for r in board if (r.get("served") or {}).get("verdict") == "ok"]
    model, version = best["path"].split("/")[1:3]
    return {
        "title": _title(board),
        "href": f"site/{folder}/index.html",
        "count": len(board),
        "best_served_tau": "–" if not served else f"{max(served):.3f}",
        "best_tau": f"{max(r['tau'] for r in board):.3f}",
        "best_label": f"{best['model_name']} v{best['version']}",
        "best_href": f"site/{folder}/{model}/{version}.html",
        "families": ", ".join(c for c in CATEGORIES if any(r["category"] == c for r in board)),
        "latest": max(r["published"] for r in board)[:10],
    }


def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=StrictUndefined,  # a missing field is an error at publish, not a blank on the page
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _names() -> list[str]:
    return [column.name for column in COLUMNS]


def _by_target_folder(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by their target's registry folder, best τ first (the order `--list` prints)."""
    groups: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: -r["tau"]):
        groups.setdefault(row["path"].split("/")[0], []).append(row)
    return dict(sorted(groups.items()))


def _title(board: list[dict]) -> str:
    return ", ".join(sorted({r["target"] for r in board}))


def _categories(board: list[dict]) -> list[dict]:
    return [{"name": c, "count": sum(r["category"] == c for r in board)} for c in CATEGORIES]


def _sort_key(value) -> str:
    return "" if value is None else str(value)


def _entry(row: dict, best: bool) -> dict:
    """What the leaderboard and the compare view show of one row."""
    model, version = row["path"].split("/")[1:3]
    verified = row.get("verified")
    return {
        "id": f"{model}/{version}",
        "label": f"{row['model_name']} v{row['version']}",
        "category": row["category"],
        "cells": [
            {"name": column.name, "text": text, "key": _sort_key(column.key(row)) if column.key else None}
            for column, text in zip(COLUMNS, cells(row))
        ],
        "best": best,
        "verified": None if not verified else f"re-measured τ {verified['tau']:.3f} on {verified['prompts']} prompts",
        "acceptance": row["per_position_acceptance"],
        "gamma": row["num_speculative_tokens"],
    }


def _compare_data(entries: list[dict]) -> dict:
    return {
        "columns": _names(),
        "drafters": [
            {k: e[k] for k in ("id", "label", "category", "acceptance", "gamma", "best")}
            | {"href": f"{e['id']}.html", "cells": [c["text"] for c in e["cells"]]}
            for e in entries
        ],
    }


def _drafter_page(hub: Path, row: dict, entry: dict, build: Path, previous: Optional[Path]) -> dict:
    version = hub / row["path"]
    prov = json.loads((version / "drafthub.json").read_text())
    ev = prov.get("eval") or {}
    card = (version / "README.md").read_text() if (version / "README.md").is_file() else ""
    card = card.replace(f"]({LOAD_PLOT})", f"](../../../{row['path']}/{LOAD_PLOT})")  # the card's plot, from the page
    meta = FRONT_MATTER.match(card)
    target = prov["target"].get("resolved") or prov["target"]["name_or_path"]
    return {
        "row": row,
        "entry": entry,
        "version_href": f"../../../{row['path']}/",
        "plots": _plots(ev, build, previous),
        "settings": ev.get("settings") or {},
        "served": ev.get("served"),
        "served_engine": served_engine(ev["served"]) if ev.get("served") else None,  # vLLM's, llama.cpp's: any engine
        "serving_load_html": markdown_html(load_section(ev.get("serving_load"), plot=False, heading=False)),
        "usage_html": markdown_html(USE_IT.sub("", usage_text(prov, target=target, export_dir=str(version.resolve())))),
        "provenance": _provenance(prov),
        "recipe": None if not prov.get("recipe") else json.dumps(prov["recipe"], indent=2),
        "card_meta": meta.group(1) if meta else None,
        "card_html": markdown_html(card[meta.end() :] if meta else card),
    }


def _provenance(prov: dict) -> list[tuple[str, str]]:
    target, recipe = prov["target"], prov.get("recipe") or {}
    ev = prov.get("eval") or {}
    return [
        ("target", target["name_or_path"]),
        ("target revision", target.get("revision") or "not pinned"),
        ("target as loaded", target.get("resolved") or target["name_or_path"]),
        ("tokenizer and chat template hash", prov.get("tokenizer_hash") or "–"),
        ("data manifest hash", prov.get("data_manifest_hash") or "–"),
        ("training", training_line(prov.get("training_data"))),
        ("recipe", recipe.get("recipe_name") or "made elsewhere, measured by `python -m eval`"),
        ("stage hash", prov.get("stage_hash") or "–"),
        ("export sha256 (the files engines read)", prov.get("export_sha256") or "–"),
        ("eval figures sha256", ev.get("figures_sha256") or "–"),
        ("created", prov.get("created") or "–"),
    ]


def _plots(ev: dict, build: Path, previous: Optional[Path]) -> dict[str, Optional[str]]:
    """The acceptance and γ-sweep plots eval draws, named by their data (a later build copies, never redraws)."""
    out: dict[str, Optional[str]] = {"acceptance": None, "gamma_sweep": None, "serving_load": None}
    for name, data, draw in (
        ("acceptance", ev.get("per_position_acceptance"), plot_acceptance),
        ("gamma_sweep", ev.get("gamma_sweep"), plot_sweep),
        ("serving_load", ev.get("serving_load"), plot_load),
    ):
        if not data:
            continue
        rel = f"plots/{hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]}-{name}.png"
        dest = build / rel
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            old = previous / rel if previous else None
            shutil.copy2(old, dest) if old and old.is_file() else draw(dest, data)
        out[name] = rel
    return out


def markdown_html(text: str) -> str:
    """Markdown as HTML; raw HTML in it is escaped (a card written elsewhere must not run script on the site)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
