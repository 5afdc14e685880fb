"""Build llama.cpp once, from the pinned source package, for the llama.cpp served checks and GGUF exports.

No registry ships Linux llama.cpp binaries, but llama-cpp-python's sdist vendors the whole llama.cpp tree
(converter, server, tokenizer tool). This script takes that sdist from the package registry (pip download; no other
network), keeps its llama.cpp tree (the converter runs from it) and builds `llama-server` and `llama-tokenize`
with cmake + ninja into `$DRAFTHUB_CACHE/llamacpp/<version>-<source digest>-cpu<CPU class>/` (or
`$DRAFTHUB_LLAMACPP`). The downloaded source package must have the pinned sha256. A finished build is reused; an
interrupted one is resumed by ninja. The binaries are built for this machine's CPU (GGML_NATIVE), hence the CPU
class in the key: another class of machine builds its own.

    python scripts/build_llamacpp.py            # ~20-25 min on 2 cores, once
    python scripts/build_llamacpp.py --check    # exit 0 if built, 1 (saying what is missing) if not
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from heads.cache import cpu_key
from heads.formats import llamacpp

TARGETS = ("llama-server", "llama-tokenize")
# the UI step downloads (off); no OpenSSL (loopback only); no tests or examples (not needed, minutes of build)
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
]


def fetch_source(home: Path) -> Path:
    """The llama.cpp tree from the pinned sdist, extracted whole or not at all."""
    src = llamacpp.programs.source_dir()
    if (src / "convert_hf_to_gguf.py").is_file():
        return src
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        print(
            f"[llama.cpp] downloading {llamacpp.programs.PACKAGE}=={llamacpp.programs.VERSION}'s source package",
            flush=True,
        )
        pin = f"{llamacpp.programs.PACKAGE}=={llamacpp.programs.VERSION}"
        # --no-binary names the package alone: ":all:" would also build its build tools (cmake) from source
        pip = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            llamacpp.programs.PACKAGE,
            pin,
            "-d",
            tmp,
        ]
        subprocess.run([*pip, "-q"], check=True)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if digest != llamacpp.programs.SDIST_SHA256:
            raise SystemExit(
                f"[llama.cpp] {sdist.name} has sha256 {digest}, not the pinned {llamacpp.programs.SDIST_SHA256}"
            )
        prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for m in members:
                m.name = m.name[len(prefix) :]
            tar.extractall(Path(tmp) / "llama.cpp", members=[m for m in members if m.name], filter="data")
        os.replace(Path(tmp) / "llama.cpp", src)
    return src


def build(home: Path, jobs: int) -> float:
    """cmake + ninja, output streamed (ninja's [n/N] lines are the progress); returns the seconds it took."""
    src, out = fetch_source(home), home / "build"
    if shutil.which("cmake") is None:
        raise SystemExit("[llama.cpp] cmake is not installed; install cmake and ninja (e.g. pip install cmake ninja)")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    t0 = time.perf_counter()
    subprocess.run(["cmake", "-S", str(src), "-B", str(out), *generator, *CMAKE_FLAGS], check=True)
    print(f"[llama.cpp] building {', '.join(TARGETS)} with {jobs} jobs", flush=True)
    subprocess.run(["cmake", "--build", str(out), "--target", *TARGETS, "-j", str(jobs)], check=True)
    seconds = time.perf_counter() - t0
    (home / "build.json").write_text(
        json.dumps(
            {"package": f"{llamacpp.programs.PACKAGE}=={llamacpp.programs.VERSION}", "seconds": round(seconds)},
            indent=2,
        )
    )
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--check", action="store_true", help="only say whether llama.cpp is ready")
    args = parser.parse_args()
    reason = llamacpp.programs.missing()
    if reason is None:
        print(f"[llama.cpp] reused build {llamacpp.programs.tool('llama-server')} ({_key()})")
        return 0
    if args.check:
        print(f"[llama.cpp] {reason}")
        return 1
    seconds = build(llamacpp.programs.home(), args.jobs)
    reason = llamacpp.programs.missing()
    if reason:
        print(f"[llama.cpp] built, but still not usable: {reason}")
        return 1
    print(f"[llama.cpp] built in {seconds:.0f} s: {llamacpp.programs.tool('llama-server')} ({_key()})")
    return 0


def _key() -> str:
    source = f"source sha256 {llamacpp.programs.SDIST_SHA256[:12]}"
    return f"{llamacpp.programs.PACKAGE} {llamacpp.programs.VERSION}, {source}, CPU {cpu_key()}"


if __name__ == "__main__":
    sys.exit(main())
