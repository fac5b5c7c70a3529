"""Cluster acceptance (`commbench check`), the pure part: which pairs and groups to measure
(schedule), which node, rank or link is slow (outliers), whether each number is good
(expect), and the summary a person or a CI job reads (summary). The measuring side is
commbench/measure/linkcheck.py."""
