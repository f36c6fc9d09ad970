"""Experts: the domain experts queries are routed to, how they are discovered, and how they answer."""
