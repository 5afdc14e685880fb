"""Screenshots of a local registry's site in headless Chromium: the front page, a target's leaderboard, a drafter
page and a compare view, as PNGs (for a README, a report, or a look at what the site shows).

    python scripts/site_screenshots.py --hub-dir ~/drafters --out shots/ [--target NAME] [--width 1400]

Needs Chromium and its driver (Debian/Ubuntu: `apt-get install chromium chromium-driver`) and `pip install
selenium`; the pages are opened from disk (file://), as anyone without a server opens them. Fails, with the
page and the message, on any error the browser's console reports.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from train.registry.site.pages import best_row  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser_missing() -> str | None:
    """Why no headless browser can run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if not any(shutil.which(b) for b in BROWSERS):
        return "no Chromium on PATH (apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver on PATH (apt-get install chromium-driver)"
    return None


@contextmanager
def open_browser(width: int = 1400, height: int = 1000):
    """A headless Chromium driven by Selenium, its console log kept (read with console_errors)."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                 f"--window-size={width},{height}", "--allow-file-access-from-files"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options
    )
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The console's errors since the last call (failed loads, script errors)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def full_page_screenshot(driver, path: Path) -> None:
    """The whole page, not only the window: the window grows to the page's height first."""
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height + 120, 600), 6000))
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))


def pages(hub: Path, target: str | None) -> dict[str, str]:
    """name → file URL of the four kinds of page, for `target` (default: the one with the most drafters)."""
    rows = json.loads((hub / "index.json").read_text())["drafters"]
    if not rows:
        raise SystemExit(f"error: {hub} has no drafters yet; publish one with push_to_hub.py --hub-dir {hub}")
    targets = sorted({r["target"] for r in rows}, key=lambda t: -sum(r["target"] == t for r in rows))
    if target is not None and target not in targets:
        raise SystemExit(f"error: no drafter for target {target!r} in {hub}; targets there: {targets}")
    board = sorted((r for r in rows if r["target"] == (target or targets[0])), key=lambda r: -r["tau"])
    folder, model, version = best_row(board)["path"].split("/")  # the page of the drafter marked best
    site = (hub.resolve() / "site").as_uri()  # through the link, as a bookmark would be
    ids = "&".join(f"v={'/'.join(r['path'].split('/')[1:])}" for r in board[:4])
    return {
        "front": (hub.resolve() / "index.html").as_uri(),
        "leaderboard": f"{site}/{folder}/index.html",
        "drafter": f"{site}/{folder}/{model}/{version}.html",
        "compare": f"{site}/{folder}/compare.html#{ids}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hub-dir", required=True, help="a local registry folder (push_to_hub.py --hub-dir)")
    ap.add_argument("--out", required=True, help="folder the PNGs are written to")
    ap.add_argument("--target", help="the target whose leaderboard is shown (default: the one with most drafters)")
    ap.add_argument("--width", type=int, default=1400, help="window width in pixels")
    args = ap.parse_args(argv)
    hub, out = Path(args.hub_dir), Path(args.out)
    if not (hub / "index.json").is_file():
        print(f"error: {hub} is not a registry (no index.json); publish a drafter there first", file=sys.stderr)
        return 2
    missing = browser_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    with open_browser(args.width) as driver:
        for name, url in pages(hub, args.target).items():
            driver.get(url)
            errors = console_errors(driver)
            if errors:
                print(f"error: {url}: {errors[0]}", file=sys.stderr)
                return 1
            full_page_screenshot(driver, out / f"{name}.png")
            driver.set_window_size(args.width, 1000)
            print(out / f"{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
