"""Sweep reports: ``python -m astrai.report <sweep dir>`` compares the jobs of a multirun.

``jobs`` reads the sweep dir, ``table`` builds and formats the table, ``groups`` the table of
jobs grouped over one override (``--mean-over seed``), ``plot`` draws the curves.
"""
