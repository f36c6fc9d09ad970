"""Pure labeling code (no Django)."""
