"""The communication ops: one module per op behind one seam (nccl-tests keeps one file per collective)."""
