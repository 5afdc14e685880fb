"""Hydra's composition errors as one line naming the fix (every `python -m train|distill|eval` entry point).

Hydra prints a misspelt key, an unknown recipe or a value of the wrong type over several lines
and a hint about HYDRA_FULL_ERROR. `run_cli` lets Hydra raise instead and says it in one line with
what would be valid: the setting names of that config, or the names in that group.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from typing import Callable

from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _valid_keys(error: OmegaConfBaseException) -> str:
    kind = getattr(error, "object_type", None)
    if kind is None or not dataclasses.is_dataclass(kind):
        return ""
    return f"; valid keys there: {', '.join(f.name for f in dataclasses.fields(kind))}"


def explain(e: BaseException) -> str:
    """One line for a Hydra or OmegaConf error: the problem, then the fix."""
    if isinstance(e, MissingConfigException) and e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        options = [o for o in (e.options or []) if not o.endswith("_schema")]  # schemas are not choices
        if group:
            return f"{group}={name} is not one of the {group} configs; choose from: {', '.join(options)}"
        return f"no config named {name!r}: {_first_line(e)}"
    cause = e.__cause__ if isinstance(e, ConfigCompositionException) and e.__cause__ is not None else e
    key = getattr(cause, "full_key", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        return f"{key} is not a setting (misspelt?){_valid_keys(cause)}"
    if isinstance(cause, MissingMandatoryValue):
        return f"{key} is required; pass {key}=..."
    if isinstance(cause, ValidationError):
        return f"{key}: {_first_line(cause)}; give a value of the right type"
    return f"{_first_line(e)}; check the overrides (python -m <app> --help lists the settings)"


def explained(task: Callable) -> Callable:
    """Wrap a Hydra task function: an OmegaConf error inside it (a required setting left out) exits 2 in one line.

    Hydra writes "Error executing job" before re-raising anything the task raises; a SystemExit it lets by."""

    @functools.wraps(task)
    def wrapper(cfg):
        try:
            return task(cfg)
        except OmegaConfBaseException as e:
            print(f"error: {explain(e)}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def run_cli(main: Callable[[], None]) -> None:
    """Call a `@hydra.main` function; a composition error exits 2 with one `error:` line, no traceback."""
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra re-raises instead of printing its own report
    try:
        main()
    except (HydraException, OmegaConfBaseException) as e:
        print(f"error: {explain(e)}", file=sys.stderr)
        sys.exit(2)
