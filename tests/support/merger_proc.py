"""A merger process for race and crash tests.

`python -m tests.support.merger_proc URI ROUNDS SEED [--region R] [--max-batch-rows N] [--commit-form F]`

Each round merges a random number of generations per region (only region R
with --region, in batches of at most N generation rows with --max-batch-rows)
and prints one JSON line with what it merged and any failures.
"""

from __future__ import annotations

import argparse
import json
import random

from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.batch import MergeBudget
from memwal_core.services.merge.service import merge


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("rounds", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("--region")
    parser.add_argument("--max-batch-rows", type=int)
    parser.add_argument("--commit-form", default="auto")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    budget = MergeBudget.default(max_rows=args.max_batch_rows)
    with MemWalTable.open(args.uri) as table:
        for _ in range(args.rounds):
            result = merge(
                table,
                regions=[args.region] if args.region else None,
                max_generations=rng.randint(1, 3),
                budget=budget,
                lease_wait=rng.uniform(0, 0.2),
                commit_form=args.commit_form,
            )
            print(json.dumps(result.to_json()), flush=True)


if __name__ == "__main__":
    main()
