"""Routing logs: loaders for RouterBench (wide format, also "your own logs"), SPROUT and RouteLLM
eval CSVs, all producing ``RoutingLog``; and train/val/test assignment.

The trainer and eval use exactly ``load_logs(paths, format=..., prices=..., seed=...)`` then
``assign_splits(log, seed=..., ratios=(0.7, 0.15, 0.15))``.
"""

from .common import RoutingLogWarning, estimate_tokens, prompt_text
from .load import detect_format, load_logs
from .logs import SPLITS, RoutingLog
from .prices import DEFAULT_PRICES, read_price_file
from .splits import assign_splits

__all__ = [
    "DEFAULT_PRICES", "SPLITS", "RoutingLog", "RoutingLogWarning", "assign_splits", "detect_format",
    "estimate_tokens", "load_logs", "prompt_text", "read_price_file",
]
