"""Sweep reports: ``python -m astrai.report <sweep dir>`` compares the jobs of a multirun.

``jobs`` reads the sweep dir, ``table`` builds and formats the table, ``plot`` draws the curves.
"""
