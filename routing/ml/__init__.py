"""Pure router code (torch, numpy; no Django): the network, its training loop, its metrics."""
