"""The report: runs + calibration + plans -> PNG figures and one self-contained index.html.

    from commbench.report import ReportOptions, build_report
    rep = build_report(ReportOptions(runs=[Path("results/r1")], out=Path("results/report")))
"""

from commbench.report.build import Report, ReportOptions, build_report

__all__ = ["Report", "ReportOptions", "build_report"]
