"""How many requests a server actually ran at once during a load level: the peak of vLLM's own
`vllm:num_requests_running` gauge on its /metrics page, polled while the level runs.

A vLLM server runs at most its max_num_seqs requests at once (fewer when its KV cache is full) and queues the rest, so
a level above that times the queue, not the drafter. drafthub sizes the servers it starts for the highest level, but a
deployed server (eval.serve_url) keeps its own limit, which no public endpoint reports: the gauge shows what it did.
The rule (eval/serving/load_figures.py): a deployed server that peaked below a level on either side is reported at
that peak and left out of the break-even verdict; servers drafthub started run every level (their limit is the
highest), and their polled peak, a lower bound, is shown only. A server without the gauge leaves the peak unknown.
"""

from __future__ import annotations

import threading
from typing import Optional

from eval.serving.process import http_get

RUNNING = "vllm:num_requests_running"
POLL_S = 0.1  # a level runs for seconds; the gauge moves once per engine step


def running_now(metrics_page: str) -> Optional[int]:
    """The gauge summed over the server's engines, from a Prometheus text page; None where the page lacks it."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics_page.splitlines()
        if line.startswith((RUNNING + "{", RUNNING + " "))
    ]
    return round(sum(values)) if values else None


class PeakRunning:
    """`with PeakRunning(url) as watch: …` polls url/metrics in a thread; `watch.peak` is the highest count seen."""

    def __init__(self, url: str, poll_s: float = POLL_S):
        self.url, self.poll_s = url.rstrip("/") + "/metrics", poll_s
        self.peak: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="drafthub-peak-running", daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                now = running_now(http_get(self.url, 2.0).decode("utf-8", "replace"))
            except (OSError, ValueError, IndexError):
                continue  # a slow or odd answer: the next poll counts
            if now is not None:
                self.peak = now if self.peak is None else max(self.peak, now)

    def __enter__(self) -> "PeakRunning":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
