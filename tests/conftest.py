"""Shared fixtures, registered as plugins so test modules need no imports of fixtures."""

pytest_plugins = ["pytester", "tests.support.databases", "tests.support.party"]
