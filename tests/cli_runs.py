"""The entry points run in-process, exactly as `python -m` runs them (their Hydra `main` under conf.cli.run_cli;
scripts/push_to_hub.py through its `main`): a fresh interpreter per call would cost seconds of imports."""

from __future__ import annotations

import contextlib
import io
import sys

from conf.cli import run_cli
from tests.conftest import import_script


def run_app(name: str, argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -m name *argv`."""
    import distill.__main__
    import eval.__main__
    import train.__main__

    main = {"train": train.__main__.main, "distill": distill.__main__.main, "eval": eval.__main__.main}[name]
    saved, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = [name, *map(str, argv)]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_cli(main)
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = saved
    return code, out.getvalue(), err.getvalue()


def run_push(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python scripts/push_to_hub.py *argv`."""
    main = import_script("push_to_hub").main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()
