"""The front README tells the truth: its commands compose, its file map is the code's layout, it stays short.

(a) Every `python -m train|eval|distill …` command, every `accelerate launch … -m train …` line and every
    `recipe=` snippet in README.md (code blocks and inline code), and every such line in the handbooks' code
    blocks, is composed with Hydra exactly as the entry point composes it (placeholders such as YOUR/MODEL,
    <ts> or $HOME become a dummy string first), so a renamed key or a deleted recipe fails here.
(b) Every path of the file map exists, and every module of train/ distill/ heads/ eval/ is in the map.
(c) README.md stays a front door: at most 320 lines.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import REPO
from train.config import register_configs

register_configs()
import distill.__main__  # noqa: E402,F401  (registers distill_schema)
import eval.__main__  # noqa: E402,F401  (registers eval_schema)

README = REPO / "README.md"
HANDBOOKS = [
    REPO / p
    for p in (
        "distill/README.md",
        "eval/README.md",
        "heads/README.md",
        "train/README.md",
        "train/registry/README.md",
        "train/results/smollm2.md",
        "train/results/toy.md",
    )
]
MAX_LINES = 320
PACKAGES = ("train", "distill", "heads", "eval")
PRIMARY = {"train": "config", "eval": "eval", "distill": "distill"}  # entry point -> its primary config in conf/
PLACEHOLDER = re.compile(r"<[^<>]*>|…|\.\.\.|\bYOUR\b|\bMODEL\b|\$\w+")  # a value the reader fills in
HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--info", "-i", "--config-name", "-cn"}


@dataclass(frozen=True)
class Command:
    app: str  # train | eval | distill
    overrides: tuple[str, ...]
    source: str  # the text it came from
    config_file: str | None = None  # accelerate launch --config_file
    doc: str = "README.md"  # the file it came from


# --- reading the README --------------------------------------------------------------------------------------


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.M | re.S)


def _prose(text: str) -> str:
    return re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)


def _shell_lines(body: str) -> list[str]:
    """A code block's lines with backslash continuations joined."""
    return body.replace("\\\n", " ").splitlines()


def _snippets(text: str, inline: bool = True) -> list[str]:
    """Every piece of a document that runs an entry point or names a recipe: code lines, and inline code."""
    candidates = [
        line for info, body in _fenced_blocks(text) if info in ("bash", "sh", "") for line in _shell_lines(body)
    ]
    if inline:
        candidates += re.findall(r"`([^`\n]+)`", _prose(text))
    wanted = re.compile(r"python -m (train|eval|distill)\b|-m train\b|\brecipe=")
    return [c for c in candidates if wanted.search(c)]


def _dummy(token: str) -> str:
    """A placeholder value becomes a dummy string: valid wherever the key takes a string, an error elsewhere."""
    key, _, value = token.partition("=")
    return f"{key}={PLACEHOLDER.sub('x', value)}"


def parse_command(snippet: str, doc: str = "README.md") -> Command | None:
    """The entry point and the Hydra overrides one snippet runs; None when it runs none of ours."""
    try:
        words = shlex.split(snippet, comments=True)
    except ValueError as e:
        raise AssertionError(f"{doc}: cannot split {snippet!r} like a shell ({e})") from None
    app, start, config_file = None, 0, None
    for i, word in enumerate(words):
        if word == "--config_file" and i + 1 < len(words):
            config_file = words[i + 1]
        if word == "-m" and i + 1 < len(words) and words[i + 1] in PRIMARY:
            app, start = words[i + 1], i + 2
            break
    if app is None:
        if not any(re.match(r"recipe=", w) for w in words):
            return None  # e.g. `python -m pytest`, or prose that only mentions a recipe's name
        app, start = "train", 0  # a bare `recipe=… key=…` snippet: overrides of python -m train
    overrides, skip = [], False
    for word in words[start:]:
        if word in ("&&", "||", ";", "|"):
            break
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            skip = word in HYDRA_FLAGS_WITH_VALUE
            continue
        if word in ("…", "..."):
            continue  # "more overrides here"
        if word.startswith("[") and word.endswith("]") and "=" in word:
            word = word[1:-1]  # an optional override, written [key=value]
        assert "=" in word, f"{doc}: {word!r} in {snippet!r} is not a key=value override"
        overrides.append(_dummy(word) if PLACEHOLDER.search(word.partition("=")[2]) else word)
    return Command(app, tuple(overrides), snippet, config_file, doc)


def readme_commands() -> list[Command]:
    """README.md's commands (code blocks and inline code), then the handbooks' code blocks (their inline code
    is prose: `python -m eval … serve=vllm` names a setting, it is not a command to run)."""
    commands = [parse_command(s) for s in _snippets(README.read_text())]
    for doc in HANDBOOKS:
        name = doc.relative_to(REPO).as_posix()
        if doc.is_file():
            commands += [parse_command(s, name) for s in _snippets(doc.read_text(), inline=False)]
    return list(dict.fromkeys(c for c in commands if c is not None))


COMMANDS = readme_commands()


# --- (a) every command composes ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _hydra():
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="conf", version_base=None):
        yield
    GlobalHydra.instance().clear()


def compose_command(command: Command):
    """Compose as `python -m <app>` does, then build the typed object the entry point builds (missing
    mandatory values and wrong types fail here too)."""
    cfg = compose(PRIMARY[command.app], overrides=list(command.overrides))
    return OmegaConf.to_object(cfg)


def test_the_readme_runs_what_a_newcomer_needs():
    front = [c for c in COMMANDS if c.doc == "README.md"]
    sources = " ".join(c.source for c in front)
    assert len(front) >= 20, [c.source for c in front]
    assert {c.app for c in front} >= {"train", "eval"}
    assert any(c.app == "train" and not c.overrides for c in front), "the main job, a bare python -m train"
    assert "recipe=eagle_llama8b" in sources and "dry_run=true" in sources
    assert any(c.config_file and "recipe=eagle_llama8b" in c.overrides for c in front), "EAGLE-3's launch line"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.doc}:{c.app}:{' '.join(c.overrides)}"[:120])
def test_readme_command_composes(command):
    if command.config_file is not None:
        assert (REPO / command.config_file).is_file(), f"{command.doc}: {command.source}: no {command.config_file}"
    compose_command(command)


@pytest.mark.parametrize(
    "snippet,misspelt",
    [
        ("python -m train recipe=eagle_llama8b trainer.lrr=0.1", "lrr"),
        (
            "accelerate launch --config_file conf/accelerate/ddp.yaml -m train recipe=toy_eagle drafter.layer_idz=[1]",
            "idz",
        ),
        ("python -m eval drafter_dir=runs/toy/<ts>/drafter prompts=p.jsonl out_dir=o eval.treee=drafter", "treee"),
        ("python -m distill out_dir=data/toy data.promts=p.jsonl", "promts"),
        ("`recipe=toy_medusa drafter.num_head=3`", "num_head"),
    ],
)
def test_an_unknown_key_fails(snippet, misspelt):
    """The check can fail: a misspelt key in a README command is an error, never silently ignored."""
    command = parse_command(snippet.strip("`"))
    with pytest.raises(Exception, match=misspelt):
        compose_command(command)


def test_an_unknown_recipe_fails():
    with pytest.raises(Exception, match="eagle_llama9b"):
        compose_command(parse_command("python -m train recipe=eagle_llama9b dry_run=true"))


def test_a_placeholder_needs_a_string_key():
    """YOUR/MODEL stands in for a name; where the key takes a number, the placeholder is a README bug."""
    compose_command(parse_command("python -m train recipe=eagle_llama8b target.name_or_path=YOUR/MODEL"))
    with pytest.raises(Exception, match="max_steps"):
        compose_command(parse_command("python -m train recipe=toy trainer.max_steps=<steps>"))


def test_every_recipe_has_a_row_in_the_recipes_table():
    text = README.read_text()
    table = text[text.index("## Recipes") :].split("\n## ", 1)[0]
    rows = {m for m in re.findall(r"^\| `([a-z0-9_]+)`", table, flags=re.M)}
    assert rows == {p.stem for p in (REPO / "recipes").glob("*.yaml")}


# --- (b) the file map is the layout ---------------------------------------------------------------------------


def _expand(name: str) -> list[str]:
    """`{a,b}.py` → a.py, b.py (any number of brace groups)."""
    parts = re.split(r"\{([^{}]*)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def file_map() -> dict[str, str]:
    """path (relative to the repository, directories ending in /) → its comment, from README's file map tree."""
    text = README.read_text()
    section = text[text.index("## File map") :]
    body = _fenced_blocks(section)[0][1]
    lines = body.splitlines()
    assert lines[0].rstrip("/ ") == "drafthub", "the tree starts at the repository root"
    entries: dict[str, str] = {}
    parents: list[str] = [""]
    for line in lines[1:]:
        m = re.match(r"^((?:[│ ] {3})*)[├└]── (\S+)\s*(?:#\s*(.*))?$", line)
        assert m, f"file map: cannot read {line!r}"
        depth = len(m.group(1)) // 4 + 1
        assert depth <= len(parents), f"file map: {line!r} is deeper than its parent"
        del parents[depth:]
        for name in _expand(m.group(2)):
            path = parents[-1] + name
            entries[path] = (m.group(3) or "").strip()
        if m.group(2).endswith("/"):
            parents.append(parents[-1] + m.group(2))
    return entries


def test_every_mapped_path_exists():
    missing = [p for p in file_map() if not (REPO / p).exists() or (REPO / p).is_dir() != p.endswith("/")]
    assert not missing, f"in README's file map but not in the repository: {missing}"


def test_every_mapped_file_has_a_comment():
    bare = [p for p, comment in file_map().items() if not p.endswith("/") and not comment]
    assert not bare, f"files without a `# comment` in README's file map: {bare}"


def test_every_module_is_in_the_map():
    mapped = set(file_map())
    modules = sorted(
        p.relative_to(REPO).as_posix()
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts and "tests" not in p.parts
    )
    unmapped = [m for m in modules if m not in mapped]
    assert not unmapped, f"modules missing from README's file map: {unmapped}"


# --- (c) short, and every link lands ---------------------------------------------------------------------------


def test_readme_is_a_front_door():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail into a handbook (at most {MAX_LINES})"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), flags=re.M)
    return {_slug(h) for h in headings}


@pytest.mark.parametrize("doc", [README, *HANDBOOKS], ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_land(doc):
    """Relative links (and their #anchors) of the README and the handbooks point at what exists."""
    assert doc.is_file(), f"{doc.relative_to(REPO)} is missing"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)}: broken links {broken}"


def test_ci_runs_exactly_the_readmes_test_command():
    """.ci/run runs the README's test command one timed step a line (installs, build and checks timed apart): the
    steps joined by && are that command, word for word."""
    ci_steps = re.findall(r"^step \w+ (.+)$", (REPO / ".ci" / "run").read_text(), flags=re.M)
    readme_tests = [
        line
        for info, body in _fenced_blocks(README.read_text())
        if info == "bash"
        for line in _shell_lines(body)
        if line.rstrip().endswith("python -m pytest -q")
    ]
    assert len(readme_tests) == 1, readme_tests
    first = ci_steps.index("pip install torch==2.13.0")  # the steps before it build the virtualenv
    assert " && ".join(ci_steps[first:]) == readme_tests[0].strip()
