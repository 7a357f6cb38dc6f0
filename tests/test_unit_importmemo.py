"""core/importmemo: a look over the loaded modules is done again only after an import."""

from __future__ import annotations

import sys
import types

from mixle_mpi.core.importmemo import imports_key, until_next_import


def test_a_look_is_remembered_until_a_module_is_imported(monkeypatch):
    runs = []

    @until_next_import
    def look():
        runs.append(1)
        return len(runs)

    assert look() == look() == 1
    monkeypatch.setitem(sys.modules, "mixle_mpi_test_fresh_module", types.ModuleType("fresh"))
    assert look() == look() == 2  # the new module may hold what is looked for


def test_the_key_changes_with_each_import_even_when_the_count_does_not(monkeypatch):
    before = imports_key()
    monkeypatch.setitem(sys.modules, "mixle_mpi_test_a", types.ModuleType("a"))
    after_a = imports_key()
    monkeypatch.delitem(sys.modules, "mixle_mpi_test_a")
    monkeypatch.setitem(sys.modules, "mixle_mpi_test_b", types.ModuleType("b"))
    assert len({before, after_a, imports_key()}) == 3


def test_a_kernel_compiled_after_the_first_look_is_named():
    """jitcache.compiled_here after importing a module with a parallel kernel: the import
    makes the look run again, so the new dispatcher is counted."""
    from mixle_mpi.core import jitcache

    first = {name for name, _ in jitcache.parallel_dispatchers()}
    module = types.ModuleType("mixle_mpi._test_parallel_kernel")
    import numba

    module.kern = numba.njit(parallel=True)(lambda x: x + 1)
    sys.modules[module.__name__] = module
    try:
        later = {name for name, _ in jitcache.parallel_dispatchers()}
    finally:
        del sys.modules[module.__name__]
    assert later - first == {"mixle_mpi._test_parallel_kernel.<lambda>"}
