"""The tuning pipeline: decorator, selection, search and the generated cache-hit path."""
