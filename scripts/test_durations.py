#!/usr/bin/env python3
"""Write tests/durations.json from a JUnit XML report (``pytest --junitxml=FILE``): each test
file's seconds (setup, call and teardown of all its tests), for ``tests/ordering.py``.

    python scripts/test_durations.py report.xml [--out tests/durations.json]
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def file_seconds(report: Path) -> dict[str, float]:
    totals: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # "tests.releases.test_rollout" or "tests.releases.test_rollout.TestClass"
        parts = classname.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if not parts:
            continue
        path = "/".join(parts) + ".py"
        totals[path] = totals.get(path, 0.0) + float(case.get("time", "0") or 0)
    return {p: round(s, 1) for p, s in sorted(totals.items(), key=lambda kv: -kv[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=Path("tests/durations.json"))
    args = parser.parse_args()
    totals = file_seconds(args.report)
    args.out.write_text(json.dumps(totals, indent=0) + "\n")
    print(f"{len(totals)} files, {sum(totals.values()):.0f} s in all -> {args.out}")


if __name__ == "__main__":
    main()
