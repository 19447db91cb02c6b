"""The wire contract shared by parties and coordinator."""

PROTOCOL_VERSION = "1"
