"""services.party package."""
