"""Entry points: `coordinator serve` and the rest of the command line.

The top of the import graph: it wires app, storage, api and pipeline together, and nothing
below imports it.
"""
