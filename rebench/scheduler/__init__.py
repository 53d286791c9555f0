"""Scheduling attempts: durable leases (leases), the queue policy (policy), this host's queue
(queue), the GPU inventory (rebench.gpus), and orphans and resume (resume). See docs/scheduling.md."""
