"""The registry's static site: every drafter on its target's leaderboard with the index's figures, drafter pages,
compare views, links that resolve, the same figures as `push_to_hub.py --list`, atomic rebuilds, and a real
browser (headless Chromium) sorting, filtering and comparing with no console error."""

import json
import os
import shutil
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from bs4 import BeautifulSoup

from heads.families import FAMILIES
from heads.formats import ENGINE_NAMES
from heads.ngram import NgramDrafter
from tests.cli_runs import run_push
from tests.conftest import import_script
from tests.eval.load_results import LOAD
from tests.train.publishing import SERVED, published_drafter, sweep_row
from train.registry import site as hub_site
from train.registry.hub_columns import COLUMNS, cells
from train.registry.local_hub import ROW_FORMAT, list_drafters, publish_local, read_index, rebuild_site
from train.registry.site.pages import best_row

HOSTILE = 'evil<img src="x" onerror="alert(1)">'  # a model name must never become markup
SWEEP = [sweep_row(g, 1 + 0.4 * g, 1 + 0.1 * g) for g in (1, 2, 4)]
SERVED_SPEED = {  # tokens/s on the engine with the drafter over without, and its interval
    "speedup": 1.31,
    "speedup_spread": {"low": 1.2, "high": 1.4},
    "tokens_per_second": {"speculative": 131.0, "no_speculation": 100.0},
}
VERIFIED = {"tau": 3.08, "prompts": 3, "device": "cpu", "lossless": True, "target_outputs_as_recorded": 3}


@pytest.fixture(scope="module")
def registry(tmp_path_factory, target, tokenizer):
    """Six drafter versions of two targets: draft LMs (one measured twice), prompt lookup, one re-measured."""
    src, hub = tmp_path_factory.mktemp("drafters"), tmp_path_factory.mktemp("registry") / "hub"
    made = [
        (published_drafter(src / "a", target, tokenizer, served=SERVED, sweep=SWEEP), None),
        (published_drafter(src / "a2", target, tokenizer, tau=2.25, speedup=0.8), None),  # slower: warned
        (published_drafter(src / "b", target, tokenizer, model_name="better", tau=3.1,
                           served=SERVED | {"tau": 3.05, **SERVED_SPEED}, serving_load=LOAD), VERIFIED),
        (published_drafter(src / "n", target, tokenizer, model_name="lookup", tau=1.6, drafter=NgramDrafter(1, 3)),
         None),
        (published_drafter(src / "e", target, tokenizer, model_name=HOSTILE, tau=1.3), None),
        (published_drafter(src / "o", target, tokenizer, model_name="other-draft", target_name="org/other", tau=2.0),
         None),
    ]  # fmt: skip
    for drafter_dir, verified in made:
        publish_local(drafter_dir, hub, verify_prompts=0, verified=verified)
    return hub


def _soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(), "html.parser")


def _texts(row) -> list[str]:
    return [cell.get_text(" ", strip=True) for cell in row.find_all(["td", "th"])]


def _pages(hub: Path) -> list[Path]:
    return [hub / "index.html", *sorted((hub / "site").rglob("*.html"))]


def test_every_link_and_asset_resolves_to_a_file_of_the_registry(registry):
    pages = _pages(registry)
    assert len(pages) == 1 + 2 * 2 + 6  # front; a leaderboard and a compare view per target; a page per version
    for page in pages:
        soup = _soup(page)
        refs = [a["href"] for a in soup.find_all(["a", "link"], href=True)] + [
            tag["src"] for tag in soup.find_all(["img", "script"], src=True)
        ]
        assert refs, page
        for ref in refs:
            url = urlsplit(ref)
            assert not url.scheme and not url.netloc, f"{page}: {ref} (no CDN, fonts or scripts from elsewhere)"
            if url.path:  # a fragment-only link stays on the page
                assert (page.parent / os.path.normpath(unquote(url.path))).exists(), f"{page}: {ref}"


def test_the_front_page_lists_each_target_with_its_drafters_and_best_served_tau(registry):
    rows = read_index(registry)
    soup = _soup(registry / "index.html")
    table = [_texts(r) for r in soup.select("#targets tbody tr")]
    assert [t[0] for t in table] == ["org/other", "toyworld:micro"]
    other, micro = table
    assert other[1:5] == ["1", "–", "2.000", "other-draft v1"]  # never served: no served τ
    assert micro[1:5] == ["5", "3.050", "3.100", "better v1"]
    assert sum(int(t[1]) for t in table) == len(rows) == 6
    assert micro[5] == "draft LM, training-free"


def test_each_leaderboard_shows_every_drafter_with_the_index_figures(registry):
    for target in ("toyworld:micro", "org/other"):
        rows = list_drafters(registry, target)  # best τ first, as --list prints them
        folder = rows[0]["path"].split("/")[0]
        soup = _soup(registry / "site" / folder / "index.html")
        headers = [th.get_text(strip=True) for th in soup.select("#leaderboard thead th")]
        assert headers == ["compare", "marks", *(c.name for c in COLUMNS)]
        shown = soup.select("#leaderboard tbody tr")
        assert len(shown) == len(rows)
        best = best_row(rows)
        for tr, row in zip(shown, rows):
            tds = tr.find_all("td")
            assert _texts(tr)[2:] == cells(row)  # the index's figures, character for character
            for td, column in zip(tds[2:], COLUMNS):
                if column.key is not None:
                    key = column.key(row)
                    assert td.get("data-sort") == ("" if key is None else str(key)), column.name
            assert tr["data-family"] == row["category"]
            assert ("best" in (tr.get("class") or [])) == (row is best)
            assert bool(tr.select(".badge.verified")) == bool(row["verified"])
        filters = [box["value"] for box in soup.select("#filters input")]
        assert filters == ["draft LM", "Medusa", "EAGLE", "parallel", "training-free"]
    assert best_row(list_drafters(registry, "toyworld:micro"))["model_name"] == "better"  # the highest served τ


def test_the_served_speedup_names_its_engine_and_interval(registry):
    column = [c.name for c in COLUMNS].index("served speed-up")
    shown = {row["model_name"]: cells(row)[column] for row in read_index(registry)}
    assert shown["better"] == "1.31× (1.20–1.40×) on vLLM 0.32.0"
    assert shown["lookup"] == "–"  # never served


def test_drafter_pages_show_figures_plots_served_check_snippets_provenance_files_and_card(registry):
    for row in read_index(registry):
        folder, model, version = row["path"].split("/")
        page = registry / "site" / folder / model / f"{version}.html"
        soup = _soup(page)
        figures = [_texts(tr) for tr in soup.select("#figures tr")]
        assert figures == [[c.name, text] for c, text in zip(COLUMNS, cells(row))]
        files = [_texts(tr) for tr in soup.select("#files tbody tr")]
        assert files == [[f["path"], f"{f['bytes']:,}", f["sha256"]] for f in row["files"]]
        assert {f["path"] for f in row["files"]} >= {"config.json", "drafthub.json", "README.md", "eval_samples.jsonl"}
        plots = [img["src"] for img in soup.select(".plots img")]
        assert len(plots) == (2 if row["model_name"] == "toy-draft" and row["version"] == 1 else 1)  # sweep: v1 only
        assert all((page.parent / p).stat().st_size > 0 for p in plots)
        served = soup.select_one("#served").get_text(" ", strip=True)
        assert (
            ("served these files" in served and f"{row['served']['tau']:.3f}" in served)
            if row["served"]
            else ("No served check" in served)
        )
        usage = soup.select_one(".usage").get_text()
        assert str((registry / row["path"]).resolve()) in usage and "THIS_DIRECTORY" not in usage  # exact paths
        assert ("prompt_lookup_max" if row["kind"] == "ngram" else "assistant_model=draft") in usage
        provenance = dict(_texts(tr) for tr in soup.select("#provenance tr"))
        assert provenance["target"] == row["target"]
        card = soup.select_one("article.card")
        assert card.find("h1").get_text() == row["model_name"]  # the model card, rendered
        load = soup.select_one("#serving-load").get_text(" ", strip=True)
        if row["serving_load"]:  # the load sweep: its table and break-even, the plot on the page and in the card
            assert f"Break-even: {LOAD['break_even']['verdict']}" in load and "| 4 |" not in load
            assert [td.get_text() for td in soup.select("#serving-load tbody tr td:first-child")] == ["1", "4"]
            (img,) = card.find_all("img")
            assert (page.parent / img["src"]).resolve() == (registry / row["path"] / "serving_load.png").resolve()
            assert (page.parent / soup.select_one("#serving-load ~ figure img")["src"]).stat().st_size > 0
        else:
            assert "No load sweep ran" in load and card.find("img") is None
        assert card.find("script") is None  # a name is text, never markup
        assert bool(soup.select(".warn")) == bool(row["speed_warnings"])


def test_the_compare_view_carries_every_drafter_with_the_index_figures(registry):
    rows = list_drafters(registry, "toyworld:micro")
    page = registry / "site" / rows[0]["path"].split("/")[0] / "compare.html"
    data = json.loads(_soup(page).select_one("script#drafters").string)
    assert data["columns"] == [c.name for c in COLUMNS]
    assert [d["cells"] for d in data["drafters"]] == [cells(r) for r in rows]
    assert [d["acceptance"] for d in data["drafters"]] == [r["per_position_acceptance"] for r in rows]
    assert all((page.parent / d["href"]).is_file() for d in data["drafters"])
    assert "<img" not in page.read_text().split('id="drafters">')[1]  # JSON in a script tag cannot close it


def test_list_prints_what_the_leaderboards_show(registry):
    code, out, err = run_push(["--list", "--hub-dir", registry])
    assert code == 0, err
    header, *lines = out.strip("\n").split("\n")
    assert header.split("\t") == ["target", *(c.name for c in COLUMNS), "path"]
    board = {}
    for folder in ("toyworld--micro", "org--other"):
        soup = _soup(registry / "site" / folder / "index.html")
        board |= {tr["data-id"]: _texts(tr)[2:] for tr in soup.select("#leaderboard tbody tr")}
    assert len(lines) == len(board) == 6
    for line in lines:
        target, *shown, path = line.split("\t")
        assert shown == board["/".join(path.split("/")[1:])]


def test_a_drafter_served_by_each_checked_engine_is_published_its_page_naming_it(tmp_path, target, tokenizer):
    """Every engine a served check can run writes its own served section (llama.cpp's has no vllm_version): each is
    published, the site renders, and the page names the engine and its version."""
    engines = sorted({c.engine for f in FAMILIES.values() for c in f.consumers if c.checked})
    assert {"vllm", "llamacpp"} <= set(engines)
    hub = tmp_path / "hub"
    for engine in engines:
        served = {k: v for k, v in SERVED.items() if k != "vllm_version"} | {"engine": engine, "engine_version": "9.9"}
        drafter = published_drafter(tmp_path / engine, target, tokenizer, model_name=f"by-{engine}", served=served)
        publish_local(drafter, hub, verify_prompts=0)
    for row in read_index(hub):
        folder, model, version = row["path"].split("/")
        text = _soup(hub / "site" / folder / model / f"{version}.html").select_one("#served").get_text(" ", strip=True)
        engine = row["model_name"].removeprefix("by-")
        assert text.startswith(f"{ENGINE_NAMES[engine]} 9.9 served these files"), text


def test_the_site_is_swapped_whole_and_a_stale_or_failed_build_is_repaired(tmp_path, target, tokenizer, monkeypatch):
    hub = tmp_path / "hub"
    a, b = (published_drafter(tmp_path / n, target, tokenizer, tau=t) for n, t in (("a", 2.5), ("b", 2.0)))
    publish_local(a, hub, verify_prompts=0)
    first = (hub / "site").resolve()
    assert (hub / "site").is_symlink() and first.parent == hub and first.name.startswith(".site-")

    def broken(*args):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr("train.registry.site.pages.render_site", broken)  # a failed build: the old site stays whole
    with pytest.raises(RuntimeError):
        publish_local(b, hub, verify_prompts=0)
    assert (hub / "site").resolve() == first and sorted(p.name for p in hub.glob(".site-*")) == [first.name]
    assert len(read_index(hub)) == 2 and hub_site.site_is_stale(hub, read_index(hub))  # index first, site stale
    monkeypatch.undo()
    code, out, err = run_push(["--site", "--hub-dir", hub])
    assert code == 0 and "(2 drafters)" in out, err
    assert not hub_site.site_is_stale(hub, read_index(hub))
    assert (hub / "site").resolve() != first and first.is_dir()  # the previous build kept for readers mid-page
    assert len(_soup(hub / "site" / "toyworld--micro" / "index.html").select("#leaderboard tbody tr")) == 2
    run_push(["--site", "--hub-dir", hub])
    assert not first.exists() and len(list(hub.glob(".site-*"))) == 2  # older builds are removed
    (hub / "index.html").write_text("<p>a front page a kill left behind</p>")
    assert hub_site.site_is_stale(hub, read_index(hub))
    publish_local(a, hub, verify_prompts=0)  # the same drafter again: nothing copied, the stale site repaired
    assert "toyworld:micro" in (hub / "index.html").read_text()


def test_a_registry_from_before_the_site_is_upgraded_in_place(tmp_path, target, tokenizer):
    hub = tmp_path / "hub"
    publish_local(published_drafter(tmp_path / "a", target, tokenizer), hub, verify_prompts=0, verified=VERIFIED)
    new_keys = ("row_format", "category", "parameters", "training_samples", "per_position_acceptance", "files")
    old = [{k: v for k, v in row.items() if k not in new_keys} for row in read_index(hub)]
    (hub / "index.json").write_text(json.dumps({"drafters": old}))
    shutil.rmtree((hub / "site").resolve())
    (hub / "site").unlink()
    (hub / "index.html").write_text("<table>the old catalog</table>")
    rows = rebuild_site(hub)
    assert rows == read_index(hub) and rows[0]["row_format"] == ROW_FORMAT and rows[0]["verified"] == VERIFIED
    assert rows[0]["published"] == old[0]["published"] and rows[0]["parameters"] > 0
    assert "toyworld:micro" in (hub / "index.html").read_text()


def test_bad_site_requests_are_one_line(tmp_path):
    code, out, err = run_push(["--site", "--hub-dir", tmp_path / "nowhere"])
    assert code == 2 and err.strip().splitlines() == [
        f"error: {tmp_path / 'nowhere'} is not a registry (no index.json); "
        f"publish a drafter with --hub-dir {tmp_path / 'nowhere'} first"
    ]
    code, out, err = run_push(["--site"])
    assert code == 2 and err.strip() == "error: --site reads a local registry; pass --hub-dir PATH"


def _screenshots():
    return import_script("site_screenshots")


def _served(directory: Path):
    """A static file server on the loopback interface, in a thread (stopped by the caller)."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
def test_a_real_browser_sorts_filters_and_compares_without_console_errors(registry, tmp_path):
    shots = _screenshots()
    missing = shots.browser_missing()
    if missing:
        pytest.skip(f"no headless browser: {missing} (.ci/run installs Chromium)")
    from selenium.webdriver.common.by import By

    t0 = time.perf_counter()
    rows = list_drafters(registry, "toyworld:micro")
    server = _served(registry)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with shots.open_browser() as driver:

            def visit(url: str, name: str) -> None:
                driver.get(url)
                shots.full_page_screenshot(driver, tmp_path / f"{name}.png")
                assert shots.console_errors(driver) == [], url

            def board_order() -> list[str]:
                return [
                    tr.get_attribute("data-id") for tr in driver.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr")
                ]

            def ids(selected: list[dict]) -> list[str]:
                return ["/".join(r["path"].split("/")[1:]) for r in selected]

            visit((registry.resolve() / "index.html").as_uri(), "front-file")  # from disk, no server
            driver.find_element(By.LINK_TEXT, "toyworld:micro").click()
            assert driver.current_url.endswith("/site/toyworld--micro/index.html")
            assert board_order() == ids(rows) and shots.console_errors(driver) == []
            visit(f"{base}/index.html", "front")
            visit(f"{base}/site/toyworld--micro/index.html", "leaderboard")
            tau = driver.find_element(By.XPATH, "//th[button[text()='τ']]")
            tau.find_element(By.TAG_NAME, "button").click()
            assert tau.get_attribute("aria-sort") == "descending"
            assert board_order() == ids(sorted(rows, key=lambda r: -r["tau"]))
            tau.find_element(By.TAG_NAME, "button").click()
            assert board_order() == ids(sorted(rows, key=lambda r: r["tau"]))
            driver.find_element(By.XPATH, "//th[button[text()='served τ']]/button").click()
            served = sorted((r for r in rows if r["served"]), key=lambda r: -r["served"]["tau"])
            order = board_order()  # served τ, highest first; drafters never served last
            assert order[: len(served)] == ids(served)
            assert set(order[len(served) :]) == set(ids([r for r in rows if not r["served"]]))
            driver.find_element(By.CSS_SELECTOR, "#filters input[value='draft LM']").click()  # hide draft LMs
            shown = [tr.get_attribute("data-id") for tr in driver.find_elements(By.CSS_SELECTOR, "#leaderboard tr")
                     if tr.is_displayed() and tr.get_attribute("data-id")]  # fmt: skip
            assert shown == ids([r for r in rows if r["category"] == "training-free"])
            driver.find_element(By.CSS_SELECTOR, "#filters input[value='draft LM']").click()
            picked = ids(rows[:2])
            for drafter_id in picked:
                driver.find_element(By.CSS_SELECTOR, f"input.pick[value='{drafter_id}']").click()
            driver.find_element(By.ID, "compare-selected").click()
            assert "/compare.html#" in driver.current_url
            heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#compare-table thead th")][1:]
            assert [h.rstrip(" ★") for h in heads] == [f"{r['model_name']} v{r['version']}" for r in rows[:2]]
            tau_row = driver.find_element(By.XPATH, "//table[@id='compare-table']//tr[th[text()='τ']]")
            assert [td.text for td in tau_row.find_elements(By.TAG_NAME, "td")] == [f"{r['tau']:.3f}" for r in rows[:2]]
            assert len(driver.find_elements(By.CSS_SELECTOR, "#acceptance-plot polyline")) == 2
            shots.full_page_screenshot(driver, tmp_path / "compare.png")
            assert shots.console_errors(driver) == []
            folder, model, version = rows[-1]["path"].split("/")  # the hostile name's page
            visit(f"{base}/site/{folder}/{model}/{version}.html", "drafter-hostile")
            folder, model, version = rows[0]["path"].split("/")
            visit(f"{base}/site/{folder}/{model}/{version}.html", "drafter")
            widths = [img.get_property("naturalWidth") for img in driver.find_elements(By.CSS_SELECTOR, ".plots img")]
            assert widths and all(w > 0 for w in widths)  # the plots loaded
    finally:
        server.shutdown()
    for name in ("front", "leaderboard", "compare", "drafter"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    print(f"browser test: {time.perf_counter() - t0:.1f} s, screenshots in {tmp_path}")


def test_targets_named_like_the_site_keep_their_own_folders(tmp_path, target, tokenizer):
    hub = tmp_path / "hub"
    for name in ("site", "sitemap"):
        publish_local(published_drafter(tmp_path / name, target, tokenizer, target_name=name), hub, verify_prompts=0)
    assert sorted(r["path"].split("/")[0] for r in read_index(hub)) == ["sitemap", "target-site"]
    (hub / "index.json").write_text(json.dumps({"drafters": []}))  # an index that lost its rows: repair finds them
    assert sorted(r["target"] for r in rebuild_site(hub)) == ["site", "sitemap"]


def test_the_best_drafter_is_the_bake_offs_pick_not_the_highest_tau():
    def row(name, tau, speedup, served_tau=None):
        served = None if served_tau is None else {"tau": served_tau, "verdict": "ok"}
        return {"model_name": name, "kind": "draft_lm", "tau": tau, "speedup": speedup, "served": served}

    layer_skip, suffix, draft = row("skip", 3.38, 0.71, 3.54), row("suffix", 2.69, 1.95, 3.0), row("lm", 3.15, 1.44)
    assert best_row([layer_skip, suffix, draft]) is suffix  # the highest τ and served τ is slower than decoding
    close = row("close", 2.9, 1.92)  # within 3% of the fastest: the higher τ wins
    assert best_row([layer_skip, suffix, draft, close]) is close


def test_a_served_tau_stands_beside_ours_counted_the_same_way():
    """vLLM counts 1 + accepted drafts per drafting step; a report's τ is tokens per target forward. Side by side
    the registry shows the served τ with drafthub's own figure counted as vLLM counts, never the report's τ."""
    from train.registry.hub_columns import COLUMNS

    served_tau = next(c for c in COLUMNS if c.name == "served τ")
    row = {"tau": 1.625, "served": {"tau": 2.618, "ours_tau": 2.6, "verdict": "ok"}}
    assert served_tau.text(row) == "2.618 (ours 2.600)"
    assert served_tau.text({"tau": 1.625, "served": None}) == "–"
