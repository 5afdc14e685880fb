"""The columns a registry shows for each drafter: one definition, read by the site's leaderboard, its drafter and
compare pages, and `push_to_hub.py --list`, so every view of the registry prints the same figures from the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from heads.card import served_engine, served_tau_text, speedup_text
from heads.load_card import break_even_short

Sortable = Optional[Union[float, str]]


@dataclass(frozen=True)
class Column:
    name: str
    text: Callable[[dict], str]  # index row → the cell every view prints
    key: Optional[Callable[[dict], Sortable]] = None  # index row → what a sort orders by (None: last); None: unsorted
    numeric: bool = True  # a sort on a number starts with the largest


def _num(x, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def _served(row: dict) -> dict:
    return row.get("served") or {}


def _speedup(row: dict) -> str:
    return speedup_text(row) + f" on {row.get('speed_device')}" + (" ⚠️" if row.get("speed_warnings") else "")


def _served_speedup(row: dict) -> str:
    """The engine's own speed-up (tokens/s with the drafter over without it, on the engine), naming the engine."""
    served = _served(row)
    return "–" if served.get("speedup") is None else f"{speedup_text(served)} on {served_engine(served)}"


def _served_check(row: dict) -> str:
    served = _served(row)
    return "–" if not served else f"{served['verdict']} ({served_engine(served)})"


def _break_even_key(row: dict) -> Sortable:
    load = row.get("serving_load")
    return None if not load else float(load["break_even"]["concurrency"] or 0)


def _re_measured(row: dict) -> str:
    v = row.get("verified")
    return "–" if not v else f"τ {v['tau']:.3f} on {v['prompts']} prompts ({v['device']})"


def _training(row: dict) -> str:
    """Samples and optimizer steps; a continued version names the one it extends (its registry path's tail)."""
    samples, steps, continues = row.get("training_samples"), row.get("training_steps"), row.get("continues")
    if not samples:
        return "none"
    text = f"{samples:,} samples" + (f", {steps:,} steps" if steps else "")
    return text + (f", continues {'/'.join(continues.split('/')[-2:])}" if continues else "")


COLUMNS = (
    Column("drafter", lambda r: f"{r['model_name']} v{r['version']}", lambda r: r["model_name"], numeric=False),
    Column("family", lambda r: r["category"], lambda r: r["category"], numeric=False),
    Column("kind", lambda r: r["kind"], lambda r: r["kind"], numeric=False),
    Column("τ", lambda r: _num(r["tau"]), lambda r: r["tau"]),
    Column("served τ", lambda r: served_tau_text(_served(r)), lambda r: _served(r).get("tau")),
    Column("speed-up (95% interval)", _speedup, lambda r: r.get("speedup")),
    Column("served speed-up", _served_speedup, lambda r: _served(r).get("speedup")),
    Column("α", lambda r: _num(r.get("alpha")), lambda r: r.get("alpha")),
    Column("parameters", lambda r: f"{r['parameters'] / 1e6:.2f} M", lambda r: r["parameters"]),
    Column("training data", _training, lambda r: r.get("training_samples") or 0),
    Column("published", lambda r: r["published"][:10], lambda r: r["published"], numeric=False),
    Column("served check", _served_check),
    # Up to how many concurrent requests the drafter still speeds up throughput and TPOT on `vllm serve`
    Column("break-even load", lambda r: break_even_short(r.get("serving_load")), _break_even_key),
    Column("re-measured", _re_measured),
    Column("size", lambda r: f"{r['size_bytes'] / 1e6:.1f} MB", lambda r: r["size_bytes"]),
)


def cells(row: dict) -> list[str]:
    """The row's cells, in COLUMNS order."""
    return [column.text(row) for column in COLUMNS]


def list_line(row: dict) -> str:
    """One `--list` line: the target, the cells the site shows, the version's path (tab-separated)."""
    return "\t".join([row["target"], *cells(row), row["path"]])


def list_header() -> str:
    return "\t".join(["target", *(column.name for column in COLUMNS), "path"])
