"""Node RPC: the wire format and the master's client (wiring layer)."""
