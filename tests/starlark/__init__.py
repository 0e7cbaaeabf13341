"""Judging the Starlark compiler: the oracle, the kforge runner, the corpus, the generator.

The Go implementation of Starlark (the ``starlark-go`` package) is the oracle: every
expectation in ``corpus/`` is its answer, and the differential tests compare kforge
with it program by program.
"""
