"""Every rank of a multi-process run writes the run's config at once: concurrent atomic writes of one
file must all succeed, leave one writer's whole text and no temporary behind."""

import threading

from heads.formats.staging import atomic_write_text


def test_concurrent_writers_of_one_file_all_succeed(tmp_path):
    path = tmp_path / "config.yaml"
    texts = [f"writer {i}\n" * 2000 for i in range(4)]
    errors = []
    start = threading.Barrier(len(texts))

    def write(text):
        start.wait()
        try:
            for _ in range(200):
                atomic_write_text(path, text)
        except OSError as e:  # before the fix: one writer renamed the shared temporary away from the other
            errors.append(e)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert path.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
