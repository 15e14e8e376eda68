"""The ``cellblock`` command line."""
