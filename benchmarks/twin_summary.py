"""Per-learner summary of the twin runs in a ``learning.py`` report (``rsl_rl_recurrent_twin_update*``; a benchmark
tool): the largest parameter difference after an update, the noise std's change against rsl_rl's, and after how many
updates the learning rates were equal.

    python benchmarks/twin_summary.py benchmarks/results/learning/anymal_h100_lstm_twin_bisect.json
"""

from __future__ import annotations

import json
import statistics
import sys

PREFIX = "Loss/twin_largest_difference"


def summarize(path: str) -> None:
    for run in json.load(open(path))["runs"]:
        tags = run.get("diagnostics", {})

        def values(key: str, tags: dict = tags) -> list[float]:
            return [value for _, value in tags[f"Loss/twin_{key}"]]

        for name in sorted(tag[len(PREFIX) :] for tag in tags if tag.startswith(PREFIX)):
            change = [a - b for a, b in zip(values(f"std_change_ours{name}"), values("std_change_rsl_rl"), strict=True)]
            rates = zip(values(f"learning_rate_ours{name}"), values("learning_rate_rsl_rl"), strict=True)
            equal = sum(abs(ours / theirs - 1) < 1e-4 for ours, theirs in rates)
            largest = values(f"largest_difference{name}")
            print(
                f"{run['run']} {name or 'default'} seed {run['seed']}: {len(change)} updates, largest difference "
                f"median {statistics.median(largest):.1e} (max {max(largest):.1e}), noise-std change ours - rsl_rl "
                f"mean {statistics.mean(change):+.2e} (rsl_rl's {statistics.mean(values('std_change_rsl_rl')):+.2e}), "
                f"learning rates equal after {equal}"
            )


if __name__ == "__main__":
    for path in sys.argv[1:]:
        summarize(path)
