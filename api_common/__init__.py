"""What both HTTP APIs share: one error dialect, one credential check, stable operation ids.

A package of its own because party_api and coordinator_api must never import each other and
`services` must never import FastAPI; the framework-free half (`services.errors.raise_for`, the
client side of the same dialect) lives in services.
"""
