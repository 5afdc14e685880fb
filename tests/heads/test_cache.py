"""Where drafthub keeps per-machine builds: one root, one CPU-class key, the compiled engine's kernels beside them."""

import os

import torch

from heads.cache import cache_root, cpu_key, use_compile_cache


def test_the_compile_cache_is_kept_under_the_cache_root_keyed_by_torch_and_the_cpu_class(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")  # recorded, so what the function sets is undone afterwards
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    path = use_compile_cache()
    assert path == tmp_path / "inductor" / f"torch{torch.__version__}-cpu{cpu_key()}" and path.is_dir()

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(path)  # what inductor reads
    assert cache_root() == tmp_path


def test_a_compile_cache_the_user_chose_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert use_compile_cache() == tmp_path / "mine"
