"""JSON Schema compiled to regular expressions (being split into modules)."""
