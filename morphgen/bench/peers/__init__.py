"""Peer systems (PyG, DGL) that morphgen's benchmarks compare against.

Each peer runs in its own process (`python -m morphgen.bench.peers.pyg|dgl --data --spec --out`)
so that its peak resident set, thread pools and imports never mix with morphgen's or another
peer's. `launcher.run_peer` starts one and returns its JSON result; see `runner.RESULT_KEYS` for
the schema.
"""

PEERS = ("pyg", "dgl")
