"""The simulation: the job's real driver code in a simulated world (FoundationDB style).

``runtime``'s Driver, its Round, its Reconfiguring and its Arrivals run unchanged against
simulated worker processes, links, a spawner, a heartbeat monitor, a shard store and a clock
(``world``), with a cheap stand-in E-step (``standin``). Seeded schedules (``schedule``) of
deaths, hangs, pauses, slow and duplicate replies, deaths during recovery and joins, failed
Spawns, adopted spares and the driver's own share are run and checked (``check``). A failing
seed prints the command that replays it: ``python -m mixle_mpi.sim --seed N``.
"""
