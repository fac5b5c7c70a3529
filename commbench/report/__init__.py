"""The report: runs + calibration + plans -> PNG figures and one self-contained index.html,
drawn by `build_report(ReportOptions(runs=[...], out=...))` (report/build.py)."""

from commbench.report.build import Report, ReportOptions, build_report

__all__ = ["Report", "ReportOptions", "build_report"]
