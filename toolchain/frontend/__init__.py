"""Frontends: model formats to Kiln's graph IR."""
