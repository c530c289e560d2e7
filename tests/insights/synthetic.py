"""A synthetic month of traffic with its ground truth, computed here from the generator's own
events (sets of user-days), independently of `fleetgate.insights.business`.

Users join on a day of the month on a plan (free 60%, paid 30%, enterprise 10%), come back each
later day with a probability of their own until they churn (a churn day drawn per user), and
10% of free users upgrade to ``paid`` on a day after they joined. Each active day has 1-3
requests (``per_day``) at random times of the day.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

DAY_MS = 86_400_000
PAID = ("paid", "enterprise")
REVENUE = {"paid": 20.0, "enterprise": 60.0}


@dataclass
class Truth:
    start: int
    end: int
    dau: dict[int, int] = field(default_factory=dict)
    mau: int = 0
    active: int = 0
    cohorts: dict[int, int] = field(default_factory=dict)
    retained: dict[int, dict[int, int]] = field(default_factory=dict)  # n -> cohort -> kept
    converted: int = 0
    unpaid: int = 0
    plan_users: dict[str, int] = field(default_factory=dict)
    plan_requests: dict[str, int] = field(default_factory=dict)
    plan_cost: dict[str, int] = field(default_factory=dict)

    def retention(self, n: int) -> float:
        eligible = [c for c in self.cohorts if c + n <= self.end]
        size = sum(self.cohorts[c] for c in eligible)
        return sum(self.retained[n].get(c, 0) for c in eligible) / size


def _user_days(rng: random.Random, start: int, days: int) -> tuple[int, list[int], str, int | None]:
    join = start + rng.randrange(days)
    stay = rng.choice((0.15, 0.35, 0.6))
    churn = join + rng.randrange(1, 40)
    active = [join] + [d for d in range(join + 1, min(churn, start + days)) if rng.random() < stay]
    plan = rng.choices(("free", "paid", "enterprise"), (6, 3, 1))[0]
    upgrade = None
    if plan == "free" and rng.random() < 0.10:
        upgrade = join + rng.randrange(1, days)
    return join, active, plan, upgrade


def synthetic_month(
    seed: int = 7,
    users: int = 10_000,
    start: int = 20_400,
    days: int = 30,
    teams: int = 3,
    per_day: tuple[int, int] = (1, 3),
) -> tuple[list[dict[str, Any]], Truth]:
    """The ``fg_insight_requests`` rows of the month (shuffled) and its truth."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    end = start + days - 1
    truth = Truth(start, end)
    seen: dict[int, set[tuple[str, str]]] = {}
    on_plan: dict[str, set[tuple[str, str]]] = {}
    for i in range(users):
        team, user = f"team-{i % teams}", f"u{i}"
        join, active, plan, upgrade = _user_days(rng, start, days)
        truth.cohorts[join] = truth.cohorts.get(join, 0) + 1
        if plan == "free" and upgrade is not None and any(d >= upgrade for d in active):
            truth.converted += 1  # its first paid day is an active day within the month
        if plan == "free":
            truth.unpaid += 1  # every user joins within the month, so every free one counts
        for day in active:
            now = "paid" if upgrade is not None and day >= upgrade else plan
            seen.setdefault(day, set()).add((team, user))
            on_plan.setdefault(now, set()).add((team, user))
            for n in (1, 7, 30):
                if day == join + n:
                    kept = truth.retained.setdefault(n, {})
                    kept[join] = kept.get(join, 0) + 1
            for _ in range(rng.randint(*per_day)):
                inp, out = rng.randint(10, 2000), rng.randint(1, 800)
                cost = inp * 150 + out * 600  # nano-USD
                truth.plan_requests[now] = truth.plan_requests.get(now, 0) + 1
                truth.plan_cost[now] = truth.plan_cost.get(now, 0) + cost
                created = day * DAY_MS + rng.randrange(DAY_MS)
                rows.append({
                    "request_id": f"r{len(rows):08d}", "created_ms": created, "day": day,
                    "team_id": team, "key_id": f"k-{team}", "end_user": user,
                    "session_id": f"s{i}-{day}", "conversation_id": None, "plan": now,
                    "alias": "chat", "version": "v1", "status": 200, "stream": 1,
                    "finish_reason": "stop", "response_id": None, "prompt_hash": None,
                    "input_tokens": inp, "output_tokens": out, "cost_nusd": cost,
                })  # fmt: skip
    for n in (1, 7, 30):
        truth.retained.setdefault(n, {})
    truth.dau = {d: len(s) for d, s in seen.items()}
    truth.mau = len(set().union(*(seen.get(d, set()) for d in range(end - 29, end + 1))))
    truth.active = len(set().union(*seen.values()))
    truth.plan_users = {p: len(s) for p, s in on_plan.items()}
    rng.shuffle(rows)
    return rows, truth
