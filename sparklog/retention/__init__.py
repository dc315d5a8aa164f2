"""retention layer."""
