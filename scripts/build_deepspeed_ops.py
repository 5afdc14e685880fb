"""Build DeepSpeed's CPU shared-memory op (what DeepSpeed's CPU accelerator loads when it starts its communication)
into $TORCH_EXTENSIONS_DIR now, so that the first test or run that starts DeepSpeed loads it instead of compiling
it (~45 s on 2 cores, once per fresh install: ninja rebuilds it when the installed sources are newer than the
build). `.ci/run` times this as a build, apart from the suite, as it times llama.cpp's.

    python scripts/build_deepspeed_ops.py

Without DeepSpeed, or where its accelerator has no such op (a GPU), it says so and exits 0.
"""

from __future__ import annotations

import importlib.util
import time


def main() -> int:
    if importlib.util.find_spec("deepspeed") is None:
        print("DeepSpeed is not installed: no op to build")
        return 0
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        print(f"DeepSpeed on {get_accelerator().device_name()}: no shared-memory op to build")
        return 0
    start = time.perf_counter()
    builder.load()
    print(f"DeepSpeed's {builder.absolute_name()}: ready in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
