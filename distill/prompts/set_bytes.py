"""The bytes behind the named prompt sets a dataset was distilled from: recorded in its manifest, checked on reuse.

`stdlib_code` and `stdlib_files` are built from the running Python's standard library, so another Python builds
other prompts under the same name; the stage hash sees only the name (and predates this record, so it stays as it
was and no finished run redistils).
"""

from __future__ import annotations

from pathlib import Path

from distill.config import DataConfig
from distill.errors import DistillError
from distill.inputs import file_digest
from distill.prompts.sets import PROMPT_SETS, is_prompt_set


def prompt_set_digests(data: DataConfig) -> dict[str, str]:
    """The bytes behind each prompt set named among data's sources (`stdlib_code` is built from this Python's
    standard library, so another Python builds other prompts). Not in the stage hash, which predates it: recorded
    in the manifest and compared on reuse, as a Hub target's commit is."""
    names = [n for s in (data.prompts, *(m.prompts for m in data.mix)) if is_prompt_set(s) for n in s.split("+")]
    return {name: file_digest(PROMPT_SETS[name]()) for name in dict.fromkeys(names)}


def changed_prompt_sets(manifest: dict, data: DataConfig) -> list[str]:
    """The prompt sets named in data whose bytes differ from those the manifest's dataset was distilled from."""
    before = manifest.get("prompt_sets") or {}  # none recorded: written before prompt sets were
    return [name for name, digest in prompt_set_digests(data).items() if before.get(name) not in (None, digest)]


def check_prompt_sets(manifest: dict, data: DataConfig, out_dir: Path) -> None:
    """A dataset distilled from a named prompt set's other bytes is not these settings' dataset."""
    if changed := changed_prompt_sets(manifest, data):
        raise DistillError(
            f"{out_dir} was distilled from other prompts than {', '.join(changed)} gives now (a prompt set built from "
            "another Python's standard library, or changed); give this run its own run_dir=PATH, or move that data/ "
            "away to distil here"
        )
