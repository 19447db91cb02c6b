"""party_api.routes package."""
