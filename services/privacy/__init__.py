"""Privacy reporting: a run's mechanisms and the attack figures measured against them (services.privacy.report)."""
