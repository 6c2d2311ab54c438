"""How the encoder's idle OpenMP threads wait, chosen before torch loads (torch reads it once).

A decision is ~60 small kernels; between two kernels each OpenMP worker waits for the next one.
- ``active`` (spin forever): workers burn the cores the proxy's event loop needs; on 2 shared cores
  a 128-token decision took 1.5 s.
- ``passive`` (sleep at once): every kernel pays a wake-up; measured +5.6 ms per 128-token decision
  (bf16: 19.7 vs 14.1 ms on 2 quiet cores, ``train/bench``).
- ``short-spin`` (default): spin ``SHORT_SPIN_COUNT`` iterations (~0.2 ms) and then sleep: hot
  inside a forward pass, idle between requests.  It sets ``GOMP_SPINCOUNT``, read by libgomp, the
  OpenMP runtime of the PyPI torch wheels on Linux (other runtimes ignore it).
- ``unset``: leave the environment alone.
A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` always wins.
"""

from __future__ import annotations

import os
import sys
import warnings

OMP_POLICIES: tuple[str, ...] = ("short-spin", "passive", "active", "unset")
SHORT_SPIN_COUNT = "10000"


def configure_openmp(policy: str = "short-spin") -> str | None:
    """Set the waiting policy for this process and its children; returns what was set (or None).

    Has no effect on a process where torch is already imported, so call it first."""
    if policy not in OMP_POLICIES:
        raise ValueError(f"OpenMP policy must be one of {OMP_POLICIES}; got {policy!r}")
    if policy == "unset" or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return None
    if "torch" in sys.modules:  # the runtime already read its settings: changing them now would only mislead
        warnings.warn(
            f"torch was imported before litellm_proteus could set the OpenMP policy {policy!r}; set "
            f"GOMP_SPINCOUNT={SHORT_SPIN_COUNT} (or OMP_WAIT_POLICY) in the environment instead",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if policy == "short-spin":
        os.environ["GOMP_SPINCOUNT"] = SHORT_SPIN_COUNT
        return f"GOMP_SPINCOUNT={SHORT_SPIN_COUNT}"
    os.environ["OMP_WAIT_POLICY"] = policy.upper()
    return f"OMP_WAIT_POLICY={policy.upper()}"


def openmp_settings() -> dict[str, str | None]:
    """The waiting-policy variables of this process (for benchmark records)."""
    return {name: os.environ.get(name) for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
