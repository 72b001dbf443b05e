"""Rewrite rules on UOps: symbolic.py (simplify: constant folding, identities, index math),
sums.py (sums in one canonical form), ranges.py (value ranges of integer nodes) and
transcendental.py (exp2, log2, sin, cos built from simpler ops, for targets that need them)."""
