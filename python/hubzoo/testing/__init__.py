"""Test helpers shipped with hubzoo: tiny random checkpoints (tiny_models)."""
