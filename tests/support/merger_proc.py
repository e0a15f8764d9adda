"""A merger process for race and crash tests: `python -m tests.support.merger_proc URI ROUNDS SEED`.

Each round merges a random number of generations per region and prints one
JSON line with what it merged and any failures.
"""

from __future__ import annotations

import json
import random
import sys

from memwal_core.services.merge.service import merge
from memwal_core.table import MemWalTable


def main() -> None:
    uri, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    with MemWalTable.open(uri) as table:
        for _ in range(rounds):
            result = merge(table, max_generations=rng.randint(1, 3))
            print(json.dumps(result.to_json()), flush=True)


if __name__ == "__main__":
    main()
