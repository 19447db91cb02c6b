"""Pure privacy and cryptography mechanisms: explicit rng, no I/O, no settings.

Privacy mechanisms: projection (VerFedGNN random projection), quantization (ternary
quantization), participation (partial-participation estimator), gradient_sharing (DGREC
1-bit encoding), psi (multi-party ECDH set intersection), dp (matrix-Gaussian noise and
accounting); FedPerGNN's clipping + Laplace LDP lives with its baseline (services.fedpergnn.ldp).
Encryption: paillier/ (the fast Paillier path behind a short facade; its modules are layered,
see its __init__). Key files belong to the key owner's service (services.p4gcn.keys), never to
crypto.
"""
