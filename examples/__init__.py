"""Example apps: ``conveyor worker examples.hello:app --demo``."""
