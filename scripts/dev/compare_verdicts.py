"""Each test's verdict in two runs of one selection: a pool run's JUnit file against an
in-place run's merged file (``rankgate merge-junit -o``).

Usage: python scripts/dev/compare_verdicts.py POOL.xml MERGED.xml
Prints the counts, each kind of difference with its count and the in-place message, and
the tests only one run has.
"""

import collections
import sys

from rankgate.report.junitfile import read_junit


def verdicts(path: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(classname, name) -> (outcome, message), as the report reads a JUnit file."""
    return {(c.classname, c.name): (c.outcome, c.message) for c in read_junit(path).cases}


def main(pool_path: str, inplace_path: str) -> None:
    pool, inplace = verdicts(pool_path), verdicts(inplace_path)
    both = set(pool) & set(inplace)
    same = sum(pool[k][0] == inplace[k][0] for k in both)
    print(f"pool {len(pool)} tests, in place {len(inplace)}, both {len(both)}, same verdict {same}")
    differ = collections.Counter(
        (pool[k][0], inplace[k][0], inplace[k][1][:100])
        for k in both
        if pool[k][0] != inplace[k][0]
    )
    for (in_pool, in_place, message), n in differ.most_common():
        print(f"  {n:4d} pool {in_pool} / in place {in_place}: {message}")
    for name, only in (("pool", set(pool) - set(inplace)), ("in place", set(inplace) - set(pool))):
        print(f"only in {name}: {len(only)}", *sorted("::".join(k) for k in only), sep="\n  ")


if __name__ == "__main__":
    main(*sys.argv[1:3])
