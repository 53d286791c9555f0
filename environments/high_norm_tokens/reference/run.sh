#!/bin/sh
# Reference solution: its predict.py replaces the starting one; nothing to run.
exit 0
