"""dlcp host stack: the DLCP wire format, transport, collectives and training integrations."""
