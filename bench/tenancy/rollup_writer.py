"""What the spend rollup costs the record writer: N records in batches of 500 through the
writer's bulk insert, with the rollup and without it (the baseline, measured in the same run,
alternating), for records spread over many groups and for records of one group, on SQLite and
PostgreSQL. Prints the median of the runs and the records per second of the writer's thread.

    PYTHONPATH=src .venv/bin/python bench/tenancy/rollup_writer.py [--records 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.tenancy.rollup_check import records  # noqa: E402
from tests.tenancy.support import create_pg_database, drop_pg_database  # noqa: E402

from fleetgate.app import MIGRATIONS  # noqa: E402
from fleetgate.store import Database  # noqa: E402
from fleetgate.tenancy.records import TABLES, rows_by_table  # noqa: E402
from fleetgate.tenancy.tables import spend  # noqa: E402


async def write_all(backend: str, recs: list[dict[str, Any]], rollup: bool) -> float:
    """Seconds to write ``recs`` into a fresh database."""
    url = await create_pg_database() if backend == "postgres" else None
    with tempfile.TemporaryDirectory() as tmp:
        db = Database.from_url(url, Path(tmp), migrations=MIGRATIONS)
        try:
            await db.migrate()
            # the baseline: the bulk insert with nothing declared to run after the spend rows
            declared = dict(spend.info)
            if not rollup:
                spend.info.clear()
            bulk = db.bulk_insert(TABLES)
            spend.info.update(declared)

            def run() -> float:
                start = time.perf_counter()
                for i in range(0, len(recs), 500):
                    bulk.insert(rows_by_table(recs[i : i + 500]))
                bulk.close()
                return time.perf_counter() - start

            return await asyncio.to_thread(run)
        finally:
            await db.aclose()
            if url is not None:
                await drop_pg_database(url)


async def main(n: int, runs: int, backends: list[str]) -> None:
    spread = records(random.Random(1), n)
    one = records(random.Random(2), n)
    when = one[0]["row"]["created_ms"]
    for r in one:
        r["row"].update(team_id="team_a", key_id="key_a", alias="a", deployment="d1",
                        version="v1", tags={"env": "prod"}, created_ms=when)  # fmt: skip
    print("| store | records | without rollup s | with rollup s | ratio | records/s with |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for backend in backends:
        for name, recs in (("many groups", spread), ("one group", one)):
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(runs):
                for rollup in (False, True):
                    times[rollup].append(await write_all(backend, recs, rollup))
            plain, rolled = statistics.median(times[False]), statistics.median(times[True])
            print(f"| {backend} | {name} | {plain:.2f} | {rolled:.2f} | {rolled / plain:.2f}x "
                  f"| {n / rolled:,.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--backends", default="sqlite,postgres")
    args = p.parse_args()
    asyncio.run(main(args.records, args.runs, args.backends.split(",")))
