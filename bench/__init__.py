"""trainstack's benchmarks, one module per measurement, run from the repository root as
``python -m bench.<module>`` (``make bench-*`` where there is a target; bench/gpu/measure.sh on a GPU
machine).

A package so that benchmarks share code by importing it (``from bench import train_report``) and reach the
helpers they have in common with the tests in ``bench.support``; nothing here reaches into tests/ or puts a
folder on ``sys.path`` for its own modules. The test cases' shared training library is imported as the
installed package it is (``trainstack_train``, installed editable from testcases/common by
requirements-testcases.txt; bench/gpu/measure.sh puts testcases/common on ``PYTHONPATH``). Committed results
are in bench/results/, dated reports in bench/reports/.
"""
