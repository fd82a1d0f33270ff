"""Checkpoint interval and DR budget from the cluster's own numbers (`lifeboat advise`).

Pure maths over plain data; no Prefect, no SDKs, no numpy (the Monte Carlo check lives in
`lifeboat_dr.core.advise.simulate` and is imported on its own).
"""

from lifeboat_dr.core.advise.advice import Advice, IntervalOutcome, advise
from lifeboat_dr.core.advise.budget import REFERENCE_RANGES, DrBudget, dr_budget
from lifeboat_dr.core.advise.inputs import INPUTS, AdviceInputs, RunbookFigures, resolve_inputs
from lifeboat_dr.core.advise.interval import (
    cluster_mtbf_s,
    daly_interval_s,
    expected_rework_exact_s,
    expected_rework_s,
    expected_rpo_s,
    expected_waste_fraction,
    gpu_cost_usd,
    gpu_hours,
    gpu_mtbf_from_observed_s,
    worst_rpo_s,
    young_interval_s,
)
from lifeboat_dr.core.advise.report import advice_markdown, format_markdown, format_text

__all__ = [
    "INPUTS",
    "REFERENCE_RANGES",
    "Advice",
    "AdviceInputs",
    "DrBudget",
    "IntervalOutcome",
    "RunbookFigures",
    "advice_markdown",
    "advise",
    "cluster_mtbf_s",
    "daly_interval_s",
    "dr_budget",
    "expected_rework_exact_s",
    "expected_rework_s",
    "expected_rpo_s",
    "expected_waste_fraction",
    "format_markdown",
    "format_text",
    "gpu_cost_usd",
    "gpu_hours",
    "gpu_mtbf_from_observed_s",
    "resolve_inputs",
    "worst_rpo_s",
    "young_interval_s",
]
