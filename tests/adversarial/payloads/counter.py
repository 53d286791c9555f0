"""An honest background job: counts, and writes `pid count` to counter.txt twenty times a second."""
import os
import time

count = 0
while True:
    count += 1
    with open("counter.tmp", "w") as handle:
        handle.write(f"{os.getpid()} {count}")
    os.replace("counter.tmp", "counter.txt")
    time.sleep(0.05)
