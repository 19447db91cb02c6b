"""The communication report's size model holds on the wire."""

from __future__ import annotations

from services.evaluation.social_comm import _matrix_bytes
from services.p4gcn.keys import PaillierSession


def test_matrix_bytes_are_a_header_plus_fixed_width_ciphertexts() -> None:
    """communication_report counts an encrypted matrix as one header + rows · dim ciphertexts of |n²| bytes."""
    session = PaillierSession.generate(512)
    try:
        ct = (session.public_key.nsquare.bit_length() + 7) // 8
        one = _matrix_bytes(session, 1, 4, 1.0)
        assert one > 4 * ct  # the header is there
        assert _matrix_bytes(session, 7, 4, 1.0) == one + 6 * 4 * ct
        assert _matrix_bytes(session, 3, 2, 1.0) == (one - 4 * ct) + 3 * 2 * ct  # the header does not grow with dim
    finally:
        session.close()
