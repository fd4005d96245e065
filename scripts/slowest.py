#!/usr/bin/env python3
"""Prints the slowest tests of the JUnit reports cargo-nextest wrote
(scripts/test.sh keeps one per pass): `scripts/slowest.py [N] REPORT...`,
N = 20 unless given. Each line: seconds, the pass (the report's name), the
test binary and the test; then the test time of each pass and binary."""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

args = sys.argv[1:]
count = int(args.pop(0)) if args and args[0].isdigit() else 20
rows = []
for report in args:
    name = Path(report).stem
    for case in ET.parse(report).iter("testcase"):
        rows.append((float(case.get("time", "0")), name, case.get("classname", ""), case.get("name", "")))
rows.sort(reverse=True)
total = sum(r[0] for r in rows)
print(f"the {min(count, len(rows))} slowest of {len(rows)} tests ({total:.0f} s of test time in all):")
for seconds, name, binary, test in rows[:count]:
    print(f"{seconds:8.1f} s  {name:<10} {binary}  {test}")
by_binary = {}
for seconds, name, binary, _ in rows:
    key = f"{name:<10} {binary}"
    by_binary[key] = by_binary.get(key, 0) + seconds
print("test time by pass and binary:")
for key, seconds in sorted(by_binary.items(), key=lambda kv: -kv[1]):
    print(f"{seconds:8.1f} s  {key}")
