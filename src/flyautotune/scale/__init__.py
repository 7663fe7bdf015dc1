"""Scale-out: tuning plans run serially or on Ray, and agreement across the ranks of a job."""

from .distributed import Agreement, DistributedSettings, active, agree, distributed
from .plan import Plan, PlanError, PlanKey, PlanOptions, load_plan
from .runner import KeyResult, PlanInterrupted, PlanResult, run_serial, summary_table, write_pack

__all__ = [
    "Agreement", "DistributedSettings", "KeyResult", "Plan", "PlanError", "PlanInterrupted", "PlanKey",
    "PlanOptions", "PlanResult", "active", "agree", "distributed", "load_plan", "run_serial", "summary_table",
    "write_pack",
]
