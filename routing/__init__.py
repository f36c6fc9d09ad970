"""Routing: the learned router, its training, the serving path and the routing event log."""
