"""`commbench trace`: read a training job's profiler traces, attribute its communication to
parallel axes, and say what to change (reader -> ops -> groups -> axes -> stats -> findings)."""
