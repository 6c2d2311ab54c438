"""``proteus eval``: PROTEUS against every baseline of the paper (section 3) and the hindsight limit.

Modules:
- ``metrics``   accuracy / cost of a routing, oracle, compliance, correlation, RE, RPI, bootstrap CIs;
- ``limit``     the hindsight-optimal cost to reach accuracy tau (an LP solved exactly by a greedy);
- ``baselines`` Random, Cheapest, BestFixed, KNN, MLP, CARROT, RouteLLM-Style, OmniRouter-Style,
                Calibrated-Threshold, on the same embeddings and splits as PROTEUS;
- ``dynamic``   tau schedules that change mid-session (step, drift, cyclic, realistic);
- ``evaluate``  the whole evaluation as a pure function of (artifact, data, embeddings);
- ``inputs``    re-reading the artifact's data and embedding it (used by the CLI);
- ``report`` / ``plots`` / ``cli``.
"""
