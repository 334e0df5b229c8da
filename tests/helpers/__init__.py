"""Code the tests share: service fixtures (pytest plugins loaded by ``tests/conftest.py``),
builders and Hypothesis strategies. Importable as ``helpers`` because pyproject's pytest
``pythonpath`` puts ``tests/`` on the path."""
