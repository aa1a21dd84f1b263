"""Training and evaluation loops and what they need (optimizer, losses, meters)."""
