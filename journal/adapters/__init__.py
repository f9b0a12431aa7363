"""Adapters: the storage interfaces of agent frameworks, on top of journals (docs/ADAPTERS.md).

Each module is one framework's interface and an optional extra (``pip install 'journal-engine[NAME]'``):
it imports its framework, so import the module you need, never this package's siblings blindly.
Adapters are users of ``journal`` and ``journal.api`` like any runtime (the layer contract in
pyproject.toml forbids them the engine): they inherit its durability, outcomes and repair.
"""
