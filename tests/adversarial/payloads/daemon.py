"""Class 3: a daemon on a Unix socket that does the solution's work for it."""
import hashlib
import os
import socket

path = "/tmp/offload.sock"
if os.path.exists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
os.chmod(path, 0o777)
server.listen(8)
while True:
    conn, _ = server.accept()
    value = conn.recv(100).strip()
    for _ in range(1_000_000):
        value = hashlib.sha256(value).digest()
    conn.sendall(value.hex().encode() + b"\n")
    conn.close()
