"""The driver's decisions as plain Python over plain data, no MPI: membership, heartbeats and
stalls, placement, rounds, reconfiguration (``reconfig_plan``), failover (``failover_plan``),
a replacement's way in (``join_plan``), heartbeat fan-in (``fanin_plan``) and settings
(``mixle_mpi.sim`` runs the driver that carries them out in a simulated world). A ``*_plan``
module decides what a ``runtime`` module of the actor's name carries out (ARCHITECTURE.md has
the pairs). Imports only ``core`` and ``launch``; never ``storage``, ``runtime``, ``fitting``
or ``cli``."""
