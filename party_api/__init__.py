"""party_api package."""
