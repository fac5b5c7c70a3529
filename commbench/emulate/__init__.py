"""Emulated nodes: a multi-host cluster on one Linux machine, with inter-node links of known rate.

Each node is a network namespace with its own hostname; local rank r of every node owns NIC
`eth<r>` (a rail, one NIC per GPU as in rail-optimized clusters); all NICs meet on one bridge,
and a token bucket (`tc tbf`) shapes every NIC both ways. `commbench emulate` builds it
(`netns`), launches a measuring command across it (`jobs`: mpirun through a launch agent, or
torchrun per node) and tears it down; `topology` is the pure description and the ground truth
written into the run's meta.json.
"""
