"""The honest solve.py: does the work itself."""
import hashlib
import sys

value = sys.stdin.read().strip().encode()
for _ in range(1_000_000):
    value = hashlib.sha256(value).digest()
print(value.hex())
