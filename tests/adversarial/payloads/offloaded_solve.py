"""A solve.py that asks the agent's daemon for the answer (and gives up after a few seconds)."""
import socket
import sys

seed = sys.stdin.read().strip()
client = socket.socket(socket.AF_UNIX)
client.settimeout(4)
try:
    client.connect("/tmp/offload.sock")
    client.sendall(seed.encode())
    print(client.makefile().readline().strip())
except OSError as exc:
    print(f"daemon unreachable: {exc}", file=sys.stderr)
