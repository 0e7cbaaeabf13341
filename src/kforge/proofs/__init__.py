"""Proofs and everything they stand on: run records and replay, state hashes, the
sampled trace commitment, signed execution proofs, node keys and machine snapshots.

* :mod:`~kforge.proofs.replay`: run records (creation input plus logged deliveries)
  and exact re-execution on either tier;
* :mod:`~kforge.proofs.hashing`: the state hash (docs/proofs.md §2), memory hashed per
  4 KiB page, rehashing only changed pages;
* :mod:`~kforge.proofs.trace`: the trace samples the state hash at the initial state,
  at the first instruction boundary where ``ticks_used >= n*K`` for each ``n``, and at
  the final state; the trace hash is a Merkle root over the samples (padded to a power
  of two by repeating the final sample); bisection narrows a divergence to one step;
* :mod:`~kforge.proofs.proof`: an :class:`ExecutionProof` carries the seed's fields plus
  what verification needs, signed with the node's ed25519 key.  The signature is an
  attestation of who claims the result; **re-execution is the verification**:
  :func:`verify_proof` replays the run and checks every field;
* :mod:`~kforge.proofs.keys` and :mod:`~kforge.proofs.snapshot`: node keys; machine
  checkpoints, restore and fork.

The byte formats are specified in ``docs/proofs.md`` (version 1).
"""

from kforge.proofs.hashing import PAGE_SIZE, StateHasher, state_hash
from kforge.proofs.proof import (
    PROOF_VERSION,
    ExecutionProof,
    ProofFormatError,
    Signer,
    VerificationReport,
    generate_proof,
    verify_proof,
)
from kforge.proofs.trace import (
    DEFAULT_SAMPLE_INTERVAL,
    ReplayParty,
    StepDivergence,
    Trace,
    TraceParty,
    first_divergent_sample,
    locate_step,
    merkle_root,
    record_trace,
    trace_hash,
)

__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "PAGE_SIZE",
    "PROOF_VERSION",
    "ExecutionProof",
    "ProofFormatError",
    "ReplayParty",
    "Signer",
    "StateHasher",
    "StepDivergence",
    "Trace",
    "TraceParty",
    "VerificationReport",
    "first_divergent_sample",
    "generate_proof",
    "locate_step",
    "merkle_root",
    "record_trace",
    "state_hash",
    "trace_hash",
    "verify_proof",
]
