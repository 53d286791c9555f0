#!/bin/sh
# Reference solution: run by the `reference` agent with the solution folder as cwd.
set -e
exec python reference_rl.py
