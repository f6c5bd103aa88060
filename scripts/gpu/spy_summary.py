"""Summarise a py-spy raw profile (``py-spy record -f raw --subprocesses``) of a pool run:
for the controller's test loop and each rank's test loop, the samples in all, then the
frames with the most samples of their own and the rankgate/pytest frames with the most
samples inside them. Usage: python3 scripts/gpu/spy_summary.py RAW [RATE_HZ]
"""

import collections
import re
import sys
from pathlib import Path

LOOPS = {"controller": "pytest_runtestloop (", "rank": "_serve (rankgate/harness/pool/worker.py"}
INTERESTING = re.compile(r"rankgate/|_pytest/|pluggy/|torch/distributed/|torch/cuda/")


def main() -> None:
    path, rate = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1000.0
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inside: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    total: collections.Counter = collections.Counter()
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        kind = next((k for k, mark in LOOPS.items() if any(mark in f for f in frames)), None)
        if kind is None:
            continue
        process = [f for f in frames if f.startswith("process ")][-1].split(":")[0]
        who = kind if kind == "controller" else f"rank {process}"
        n = int(count)
        total[who] += n
        code = [f for f in frames if not f.startswith("process ")]
        own[who][code[-1]] += n
        for frame in set(code):
            if INTERESTING.search(frame):
                inside[who][frame] += n
    for who in sorted(total):
        print(f"== {who}: {total[who]} samples in its test loop ({total[who] / rate:.2f} s)")
        print("  most samples of their own:")
        for frame, n in own[who].most_common(15):
            print(f"  {n:7d} {100 * n / total[who]:5.1f}%  {frame}")
        print("  rankgate/pytest/torch.distributed frames, samples inside:")
        for frame, n in inside[who].most_common(40):
            print(f"  {n:7d} {100 * n / total[who]:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
