"""Human gates: a run waits for a person's approval (of a phase about to start, or of a tool call) or
answer (a conflict's question), durably, with a deadline on the server's clock. ``build`` makes the gates
and the ops that open and close them with a move; ``decide`` takes people's decisions and the deadline's."""
