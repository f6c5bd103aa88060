"""Two JUnit files of the same selection: do they hold the same tests with the same verdicts?

Usage: python3 scripts/gpu/same_tests.py A.xml B.xml  (exit 1 when they differ)
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def verdicts(path: str) -> tuple[dict[str, str], float]:
    root = ET.parse(path).getroot()
    found = {}
    for case in root.iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return found, sum(float(s.get("time", 0)) for s in suites)


def main(a: str, b: str) -> int:
    (first, first_s), (second, second_s) = verdicts(a), verdicts(b)
    only = sorted(set(first) ^ set(second))
    differ = sorted(t for t in set(first) & set(second) if first[t] != second[t])
    for name, table in ((a, first), (b, second)):
        counts: dict[str, int] = {}
        for verdict in table.values():
            counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{name}: {len(table)} tests {dict(sorted(counts.items()))}")
    print(f"time: {first_s:.1f} s vs {second_s:.1f} s ({first_s / max(second_s, 1e-9):.2f}x)")
    for t in only:
        print(f"only in {a if t in first else b}: {t}")
    for t in differ:
        print(f"differs: {t}: {first[t]} vs {second[t]}")
    print("same tests, same verdicts" if not only and not differ else "DIFFERENT")
    return 1 if only or differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
