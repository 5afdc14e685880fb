"""Peer trainers beside drafthub's (issue 72's benchmark, scripts/bench_peer_trainers.py): the same distilled samples,
loss masks, target features and draft vocabulary written in each peer's own layout, its trainer launched on this
machine's device, its export read back so that one engine measures every trainer's drafter alike."""
