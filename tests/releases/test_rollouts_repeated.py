"""Real rollouts in a row, the small version of ``bench/releases/rollouts.py`` (which runs 20 +
20): a gateway process, three simulator engines (two identical, one failing 10% of requests),
clients sending throughout; three rollouts of a candidate identical to production all reach
production, three of the failing candidate are all rolled back on the error rate, and no client
request fails where the alias had another deployment to retry it on (none fails at all here:
each failed attempt on the candidate was retried on the baseline)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "releases" / "rollouts.py"


def test_identical_candidates_reach_production_and_failing_ones_roll_back(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rollouts.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--identical", "3", "--failing", "3", "--deadline", "300",
         "--rollout-timeout", "45", "--json", str(out)],
        capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [r["kind"] for r in results] == ["identical"] * 3 + ["failing"] * 3, done.stdout
    for r in results:
        want = "completed" if r["kind"] == "identical" else "rolled_back"
        assert r["verdict"] == want, (r, done.stdout)
        assert r["to_candidate"] > 0 and r["requests"] > 0
        # a client error is allowed only where the request had no other deployment
        assert r["errors_with_retry_target"] == 0, r["errors"]
        if r["kind"] == "failing":
            assert "error rate" in r["reason"], r
            # the candidate failed attempts; the retries on the baseline hid them from clients
            assert r["candidate_failed_attempts"] > 0, r
    baselines = {r["baseline"] for r in results if r["kind"] == "failing"}
    assert baselines == {results[2]["candidate"]}  # the last identical one stayed production
