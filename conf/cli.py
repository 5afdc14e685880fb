"""Errors as one line naming the fix, for every `python -m train|distill|eval` entry point.

Hydra prints a misspelt key, an unknown recipe or a value of the wrong type over several lines
and a hint about HYDRA_FULL_ERROR. `run_cli` lets Hydra raise instead and says it in one line with
what would be valid: the setting names of that config, or the names in that group. A Ctrl-C, a full
disk or a path the run cannot use is one line too: every writer is atomic, so a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import re
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


INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a Ctrl-C'd command
INTERRUPTED_LINE = "interrupted; rerun the same command to resume"
NOT_GROUPS = ("accelerate",)  # conf/ folders that hold other tools' files, not Hydra config groups
_ACCELERATE_OVERRIDE = re.compile(r"^[+~]{0,2}accelerate(?:=(?P<name>.*))?$")


def _chain(e: BaseException):
    """e, then what it was raised from or during (a library's error around an OSError)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def disk_full(e: BaseException) -> bool:
    """A full disk however it arrives: an OSError, or an error around one (safetensors says "os error 28")."""
    return any(
        (isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT))
        or any(s in str(x) for s in ("No space left on device", f"(os error {errno.ENOSPC})"))
        for x in _chain(e)
    )


def explain_os_error(e: BaseException) -> str | None:
    """One line for a full disk or a file-system OSError naming its path; None for anything else (re-raised)."""
    if disk_full(e):
        where = next((x.filename for x in _chain(e) if isinstance(x, OSError) and x.filename), None)
        return f"no space left on {where or 'the device'}; free space and rerun — nothing was lost"
    if isinstance(e, OSError) and e.errno is not None and e.filename is not None:
        fix = (
            "; fix its permissions or choose another path"
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
            else "; check the path"
        )
        return f"cannot use {e.filename}: {e.strerror}{fix}"
    return None  # a network, Hub or loader error, or a bug: its traceback is the useful report


def _close_progress_bars() -> None:
    """End live tqdm bars first, so the one line printed next starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _fail(line: str, code: int) -> None:
    _close_progress_bars()
    print(line, file=sys.stderr)
    sys.exit(code)


def explained(task: Callable) -> Callable:
    """Wrap a Hydra task function: an OmegaConf error inside it (a required setting left out), a full disk or a
    path it cannot use exits 2 in one line.

    Hydra writes "Error executing job" before re-raising anything the task raises; a SystemExit it lets by."""

    @functools.wraps(task)
    def wrapper(cfg):
        try:
            return task(cfg)
        except OmegaConfBaseException as e:
            _fail(f"error: {explain(e)}", 2)
        except Exception as e:  # only what explain_os_error names; anything else keeps its traceback
            line = explain_os_error(e)
            if line is None:
                raise
            _fail(f"error: {line}", 2)

    return wrapper


def _accelerate_override(argv: list[str]) -> str | None:
    """The error line for `accelerate=NAME`: conf/accelerate/ holds launch files, which look like a group."""
    for arg in argv:
        m = _ACCELERATE_OVERRIDE.match(arg)
        if m:
            name = m["name"] or "NAME"
            return (
                f"{arg}: conf/accelerate/ holds `accelerate launch` config files, not a config group; "
                f"plan with plan.accelerate={name} dry_run=true, or train with "
                f"accelerate launch --config_file conf/accelerate/{name}.yaml -m train ..."
            )
    return None


def config_groups() -> str:
    """`--help`'s groups (the `drafthub_config_groups` resolver): Hydra's own listing without conf/accelerate/
    (not a group) and without the `<kind>_schema` entries (not choices)."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    lines = []
    for group in sorted(loader.list_groups("")):
        options = [o for o in sorted(loader.get_group_options(group)) if not o.endswith("_schema")]
        if group != "hydra" and group not in NOT_GROUPS and options:
            lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def launch_configs() -> str:
    """The names in conf/accelerate/ (the `drafthub_launch_configs` resolver of `--help`)."""
    from hydra.core.global_hydra import GlobalHydra

    return ", ".join(sorted(GlobalHydra.instance().config_loader().get_group_options("accelerate")))


def run_cli(main: Callable[[], None]) -> None:
    """Call a `@hydra.main` function; a composition error exits 2 with one `error:` line, a Ctrl-C 130 with one
    line (`main.interrupted_line` where rerunning does not resume), never a traceback."""
    from omegaconf import OmegaConf

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra re-raises instead of printing its own report
    for name, resolver in (("drafthub_config_groups", config_groups), ("drafthub_launch_configs", launch_configs)):
        OmegaConf.register_new_resolver(name, resolver, replace=True)  # conf/config.yaml's hydra.help
    try:
        line = _accelerate_override(sys.argv[1:])
        if line:
            _fail(f"error: {line}", 2)
        main()
    except (HydraException, OmegaConfBaseException) as e:
        _fail(f"error: {explain(e)}", 2)
    except KeyboardInterrupt:  # BaseException: Hydra's job runner lets it through untouched
        _fail(getattr(main, "interrupted_line", INTERRUPTED_LINE), INTERRUPTED)
