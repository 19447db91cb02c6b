"""services.crypto package."""
