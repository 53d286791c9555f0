"""Attacks a hostile agent would try on the Docker backend; each case must fail to gain anything.

Every test here carries the `adversarial` and `docker` markers. A case asserts that the attempt
ends with no protected byte outside /protected, no score above what honest code earns, and the
attempt recorded as it really happened. See docs/security.md for the threat model.
"""
