"""heads/README.md's "Adding a drafter family" is the real list: a throw-away family, `echo` (a draft LM whose
export says it is an echo), is added to a copy of the repository in exactly the files the list names, and
nowhere else. The copy then walks it through every table (tests/test_families.py) and runs the whole
pipeline with it on the micro world, as a contributor's first run would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.test_cli import SMALL

KIND = "echo"
MARK = {"drafthub_kind": KIND}
FILES = {  # each path of the list, and what the throw-away family puts there
    "heads/<kind>.py": '''"""Echo: a draft LM whose export names its family (a test's throw-away family)."""

import json
from pathlib import Path

MARK = {"drafthub_kind": "echo"}


def mark_export(out: Path) -> None:
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **MARK}, indent=2))
''',
    "heads/config.py": """

@dataclass
class EchoConfig(DraftLMConfig):
    kind: str = "echo"
""",
    "conf/drafter/<kind>.yaml": "defaults:\n  - echo_schema\n",
    "heads/families/<kind>.py": '''"""The echo family's row: the draft LM's, with its own export mark."""

import dataclasses

from heads.config import EchoConfig
from heads.echo import mark_export
from heads.families import draft_lm
from heads.families.base import copy_with_tokenizer


def _write(job, out):
    copy_with_tokenizer(job, out)
    mark_export(out)


FAMILY = dataclasses.replace(
    draft_lm.FAMILY,
    kind="echo",
    schema=EchoConfig,
    recognizes=lambda config: config.get("drafthub_kind") == "echo",
    write=_write,
)
''',
    "train/setups/<kind>.py": '''"""The echo family trains as a draft LM."""

from train.setups import draft_lm

SETUP = draft_lm.SETUP
''',
    "eval/proposers/<kind>.py": '''"""The echo family drafts as a draft LM."""

from eval.proposers import draft_lm

ENTRY = draft_lm.ENTRY
''',
    "tests/test_families.py": """

from heads.config import EchoConfig  # noqa: E402

NATIVE["echo"] = NATIVE["draft_lm"]
SETTINGS["echo"] = EchoConfig()
""",
    "recipes/toy_<kind>.yaml": """defaults:
  - override /target: toy
  - override /data: toy
  - override /drafter: echo
recipe_name: toy_echo
""",
}
TABLES = {  # the one line each table gains
    "heads/families/__init__.py": ("FAMILIES", "draft_lm.FAMILY,", "echo.FAMILY,"),
    "train/setups/__init__.py": ("SETUPS", '"draft_lm": draft_lm.SETUP,', '"echo": echo.SETUP,'),
    "eval/proposers/__init__.py": ("PROPOSERS", '"draft_lm": draft_lm.ENTRY,', '"echo": echo.ENTRY,'),
}


def listed_files() -> set[str]:
    """The files heads/README.md's "Adding a drafter family" names (bold paths and table files)."""
    text = (REPO / "heads" / "README.md").read_text()
    section = text[text.index("## Adding a drafter family") :]
    section = section[: section.index("\n## ", 1)]
    paths = set(re.findall(r"\*\*`([\w/<>.]+\.(?:py|yaml))`\*\*", section))
    paths |= set(re.findall(r"\(`([\w/]+/__init__\.py)`\)", section))
    return paths


def _add_family(root) -> list[str]:
    """Write the echo family into the copy at `root`; the files touched, relative to it."""
    touched = []
    for listed, text in FILES.items():
        path = root / listed.replace("<kind>", KIND)
        path.write_text(path.read_text() + text if path.exists() else text)
        touched.append(listed)
    for table, (name, anchor, line) in TABLES.items():
        path = root / table
        source = path.read_text()
        assert anchor in source, f"{table} {name} lists its rows as `{anchor}`"
        indent = re.search(rf"\n(\s*){re.escape(anchor)}", source).group(1)
        source = source.replace(anchor, f"{anchor}\n{indent}{line}", 1)
        package = table.rsplit("/", 1)[0].replace("/", ".")
        imports = re.search(rf"from {package} import \(\n((?:\s+\w+,\n)+)\)\n", source) or re.search(
            rf"from {package} import ([\w, ]+)\n", source
        )  # the parenthesised list ruff writes, or one line
        modules = sorted({*re.findall(r"\w+", imports.group(1)), KIND})
        listed = f"from {package} import (\n" + "".join(f"    {m},\n" for m in modules) + ")\n"
        path.write_text(source.replace(imports.group(0), listed))
        touched.append(table)
    return touched


@pytest.fixture(scope="module")
def copy_with_echo(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo") / "drafthub"
    ignore = shutil.ignore_patterns(".git", ".venv", "runs", "__pycache__", "*.egg-info", ".ruff_cache")
    shutil.copytree(REPO, root, ignore=ignore)
    return root, _add_family(root)


def _run(root, *args, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_list_names_every_file_a_new_family_touches(copy_with_echo):
    _, touched = copy_with_echo
    assert set(touched) == listed_files()
    assert len(touched) == 11  # 8 files of the family's own or shared + 3 tables' files


@pytest.mark.slow
def test_the_throw_away_family_passes_the_family_walk_and_a_whole_run(copy_with_echo, tmp_path):
    root, _ = copy_with_echo
    walk = _run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", KIND, "tests/test_families.py")
    assert walk.returncode == 0, walk.stdout[-3000:] + walk.stderr[-2000:]
    assert "2 passed" in walk.stdout, walk.stdout[-500:]  # echo's table entries and its export round trip
    run_dir = tmp_path / "run"
    run = _run(root, "-m", "train", f"recipe=toy_{KIND}", *SMALL, f"run_dir={run_dir}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((run_dir / "drafter" / "config.json").read_text())["drafthub_kind"] == KIND
    assert json.loads((run_dir / "drafter" / "drafthub.json").read_text())["kind"] == KIND
