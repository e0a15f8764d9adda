"""A writer process for crash tests: durable puts in a loop, printing each acknowledged round."""

from __future__ import annotations

import sys

import pyarrow as pa

from memwal_core.services.writer import MemWalWriter


def main() -> None:
    uri, rows_per_round = sys.argv[1], int(sys.argv[2])
    # The longest interval allowed: a durable put must write its WAL entry at once, not at the next
    # interval tick (a put that waited a minute would time the test out).
    writer = MemWalWriter(uri, durable_write=True, max_wal_flush_interval_ms=60_000)
    round_ = 0
    while True:
        keys = list(range(round_ * rows_per_round, (round_ + 1) * rows_per_round))
        writer.put(
            pa.table({"id": keys, "name": [f"r{round_}"] * len(keys), "score": [float(round_)] * len(keys)})
        )
        print(round_, flush=True)  # acknowledged: the put returned
        round_ += 1


if __name__ == "__main__":
    main()
