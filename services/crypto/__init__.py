"""Pure privacy and cryptography mechanisms: explicit rng, no I/O, no settings.

Privacy mechanisms: projection (VerFedGNN random projection), quantization (ternary
quantization), participation (partial-participation estimator), gradient_sharing (DGREC
1-bit encoding), ldp (FedPerGNN clipping + Laplace), psi (multi-party ECDH set intersection).
"""
