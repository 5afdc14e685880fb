"""CI's whole run, judged as the suite is (tests/suite_report.py): in minutes of the reference machine.

What the change decides (the checks, the tests, the glue between them) counts as its time here × this machine's
speed, which the suite measured (eval/machine.py). Installs (the package mirror's speed) and llama.cpp's build (this
machine's compiler, and 0 s where the cache holds the build) depend on neither the change nor its code: they are
reported apart and not judged. Stdlib only: it runs after a failed install too.

    python3 .ci/times.py WHOLE_S INSTALL_S BUILD_S CHECKS_S MACHINE_JSON

Exit 1 when the judged part is past WHOLE_BUDGET_MIN on a machine whose speed the suite trusted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WHOLE_BUDGET_MIN = 40  # reference-machine minutes, installs and the builds (llama.cpp, DeepSpeed's op) apart


def clock(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def report(whole: int, install: int, build: int, checks: int, probe: dict | None) -> tuple[list[str], bool]:
    """The lines CI prints, and whether the run is past its budget."""
    judged = whole - install - build
    lines = [
        f"[ci] installs (pip, apt: the package mirror's speed, not judged): {clock(install)}",
        f"[ci] builds (this machine's compiler: llama.cpp, 0 s from the cache, and DeepSpeed's CPU op; not judged): "
        f"{clock(build)}",
    ]
    if probe is None:
        lines.append(f"[ci] whole run: {clock(whole)}; not judged: the suite did not measure the machine")
        return lines, False
    reference = judged * probe["speed"] / 60
    head = f"[ci] whole run: {clock(whole)} here; judged: {clock(judged)} (checks and tests {clock(checks)})"
    if not probe["trusted"]:
        lines.append(f"{head}; not judged: speed {probe['speed']:.2f}× is outside the trusted range")
        return lines, False
    verdict = "within" if reference <= WHOLE_BUDGET_MIN else "PAST"
    lines.append(
        f"{head} = {reference:.1f} min of the reference machine (speed {probe['speed']:.2f}×), {verdict} its budget "
        f"of {WHOLE_BUDGET_MIN} min"
    )
    return lines, reference > WHOLE_BUDGET_MIN


def main(argv: list[str]) -> int:
    whole, install, build, checks = (int(a) for a in argv[:4])
    path = Path(argv[4])
    probe = json.loads(path.read_text()) if path.is_file() else None
    lines, over = report(whole, install, build, checks, probe)
    print("\n".join(lines))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
