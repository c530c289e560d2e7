"""Capacity planner: traffic -> QPS -> tokens/s -> GPUs -> cost (``fleetgate plan``).

Example::

    from fleetgate.plan import PlanInputs, make_plan
    plan = make_plan(PlanInputs(dau=1_000_000, conversations_per_user=3,
                                turns_per_conversation=5))
"""

from fleetgate.plan.calibration import calibration_report
from fleetgate.plan.des import ttft_quantile_des
from fleetgate.plan.events import BusinessLine, Event
from fleetgate.plan.forecast import Forecast, fit_history, seasonal_naive, wape
from fleetgate.plan.from_bench import BenchCalibration, calibrate
from fleetgate.plan.history import HourlyHistory, read_history_csv, read_history_store
from fleetgate.plan.model import PlanInputs, default_diurnal, round_up
from fleetgate.plan.planner import (
    hourly_gpus,
    make_plan,
    predict_ttft_p95_ms,
    predict_ttft_p95_ms_des,
    queueing_sizing,
)
from fleetgate.plan.purchase import PurchasePolicy, monthly_gpus, purchase_plan
from fleetgate.plan.queueing import erlang_c, min_servers_for_wait, wait_quantile_s
from fleetgate.plan.render import plan_table, plot_plan

__all__ = [
    "BenchCalibration",
    "BusinessLine",
    "Event",
    "Forecast",
    "HourlyHistory",
    "PlanInputs",
    "PurchasePolicy",
    "calibrate",
    "calibration_report",
    "fit_history",
    "monthly_gpus",
    "purchase_plan",
    "read_history_csv",
    "read_history_store",
    "seasonal_naive",
    "wape",
    "default_diurnal",
    "erlang_c",
    "hourly_gpus",
    "make_plan",
    "min_servers_for_wait",
    "plan_table",
    "plot_plan",
    "predict_ttft_p95_ms",
    "predict_ttft_p95_ms_des",
    "queueing_sizing",
    "round_up",
    "ttft_quantile_des",
    "wait_quantile_s",
]
