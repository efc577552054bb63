"""The maintainers' scripts (not shipped): ``.venv/bin/python tools/<script>.py``."""
