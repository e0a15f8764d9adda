"""Region merge plans made up for the pure merge rules: no table behind them."""

from __future__ import annotations

from memwal_core.services.merge.plan import GenerationSource, RegionMergePlan


def region(name: str, sizes: list[int], merged: int = 0) -> RegionMergePlan:
    """A region plan with one generation per size (rows; bytes = 10 x rows)."""
    generations = tuple(
        GenerationSource(merged + i + 1, f"mem://{name}/{i}", rows=n, bytes=10 * n)
        for i, n in enumerate(sizes)
    )
    return RegionMergePlan("mem://t", name, merged, 1, generations)
