"""Failures on purpose, to test recovery with real processes. Two parts at two layers:

- low (the policy's rank; imports ``core`` and ``launch`` only): the fault plan and the hook
  a rank fires it with (``faults``: ``Fault``, ``FaultInjector``, used by the driver and the
  worker), and the pure decisions of the external campaign (``external_plan``);
- high (the cli's rank): the campaigns a person runs, ``mixle-mpi chaos`` (``campaign``: fault
  plans inside the ranks) and ``mixle-mpi chaos --external`` (``external``: kills real ranks
  from outside).

``tests/test_unit_layers.py`` gives each module its rank (``MODULE_LAYER``): no low module
imports a high one. This file imports nothing."""
