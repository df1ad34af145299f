"""sliced_agent: the node agent of sliced, one process per host.

    python3 -m sliced_agent --server HOST:PORT [--token_file F] [--tls_ca F]

It detects the host (host.py, metadata.py), registers it and heartbeats at a
third of the lease (agent.py, backoff.py), reports TPU metrics from the GKE
device plugin or libtpu (tpu_metrics.py), ships libtpu logs (logtail.py),
checks the host's health (health.py) and drains the node on a maintenance
or preemption notice or SIGUSR1. sim.py runs simulated hosts on the same code.
See docs/agent.md.
"""
