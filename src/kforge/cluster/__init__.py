"""A kforge cluster on NATS JetStream: many worker processes and machines, one engine's
behaviour, failover without losing a tick.

The design in brief (``docs/cluster.md`` has it in full):

- The cluster's sandboxes are spread over a fixed number of **partitions**; each
  partition is one :class:`~kforge.engine.Engine`, run by one worker at a time
  under a **lease** (:mod:`kforge.cluster.leases`).  Nothing of the engine is
  written twice: a partition is an engine whose journal store is a JetStream
  stream (:mod:`kforge.cluster.journal_store`), whose ledger mirrors the shared
  accounts (:mod:`kforge.cluster.accounts`), whose vault is filled from the
  object store (:mod:`kforge.cluster.programs`).
- A worker that takes a partition over rebuilds its engine from the journal with
  the engine's own rebuild: same records, same ``apply``, so every sandbox goes on
  with the same ticks, outputs, events and proofs.
- A **gateway** (``kforge serve --nats``, :mod:`kforge.cluster.gateway`) serves the
  HTTP API, the event socket and the dashboard with an engine whose methods are
  requests to the workers (:mod:`kforge.cluster.protocol`); it holds nothing.
- Events are derived from the journal once it is stored, into a stream whose
  subjects name kind, owner and sandbox (:mod:`kforge.cluster.names`).
"""
