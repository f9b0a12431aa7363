"""Benchmarks of journal against the stores a user would otherwise pick, in one run.

``journal bench`` (journal/cli/bench.py) runs them; bench/README.md holds the latest
figures with the command that produced them. The event mix is in ``events``, one adapter per
store in ``stores``, the workloads, rounds, ratios and reports in ``runner``.
"""
